"""The reference rows: one env in a loop, the machine's ceiling, the bare lockstep
loop, and EnvPool.

- ``single``: one env stepped in a plain loop in this process.
- ``ceiling``: N independent processes, N = usable CPUs, each stepping one env
  of the workload in a plain loop; their env-steps/s summed. No batched env of
  Python envs can beat it on this machine.
- ``bare_loop``: the bound of the lockstep design that ``FastVectorEnv`` and
  ``FastParallelEnvironment`` share. N = usable CPUs worker processes (placed
  by the OS) own ``num_envs / N`` envs each; at each step the trainer posts a
  STEP job to every worker through the native job slots, with torch's threads
  parked as a front end's step parks them, and waits for all of them; each
  worker steps its envs with the workload's actions and reports done. Nothing
  else crosses: no action, observation or info, no batch is assembled. What a
  front end costs over it is its own per-step work. Its step returns one fixed
  batch of the workload's first observations, for ``--policy``.
- ``envpool``: EnvPool's own (C++) version of the same env,
  ``envpool.make_gymnasium(id, num_envs=n, num_threads=usable CPUs)``.
"""

import importlib.util
import math
import multiprocessing
import time
import warnings
from multiprocessing.connection import Connection
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from alf_env.bench.core import ACTION_SEED, NUM_ACTIONS, Actions, Plan, Runner, Skip
from alf_env.bench.workloads import get as get_workload
from alf_env.bench.workloads import make_env
from alf_env.control_plane.affinity import usable_cpu_count
from alf_env.control_plane.watchdog import die_with_parent, parent_death_plan
from alf_env.data_plane.pool_park import PoolPark
from alf_env.data_plane.shared_block import (
    SPIN_ADAPTIVE,
    JobStatus,
    JobType,
    SharedBlock,
    WaitStatus,
)

#: Seconds a ``ceiling`` process may take to start, warm up or report.
CEILING_TIMEOUT = 120.0


def plain_loop(env: Any, actions: Sequence[np.ndarray], start: int, count: int,
               done: bool) -> bool:
    """Steps ``env`` ``count`` times (a reset after the end of an episode counts
    as a step, as in the vector envs' auto-reset); returns whether it ended."""
    n = len(actions)
    for i in range(start, start + count):
        if done:
            env.reset()
            done = False
        else:
            _, _, terminated, truncated, _ = env.step(actions[i % n])
            done = terminated or truncated
    return done


def single_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    """One env in this process; a round is ``num_envs`` env-steps of it."""
    env = make_env(workload, 0)
    env.reset(seed=ACTION_SEED)
    flat = actions.per_env()
    done = False

    def step(k: int) -> None:
        nonlocal done
        done = plain_loop(env, flat, k * num_envs, num_envs, done)

    return Runner(step=step, close=env.close)


def _ceiling_worker(conn: Connection, workload: str, env_id: int,
                    actions: List[np.ndarray], warmup: int, steps: Optional[int],
                    seconds: float) -> None:
    """One ``ceiling`` process: build, warm up, wait for "go", run, report."""
    try:
        env = make_env(workload, env_id)
        try:
            env.reset(seed=ACTION_SEED + env_id)
            done = plain_loop(env, actions, 0, warmup, False)
            conn.send(("ready", None))
            conn.recv()
            clock = time.perf_counter
            begin = clock()
            if steps is not None:
                plain_loop(env, actions, warmup, steps, done)
                count = steps
            else:
                deadline, count = begin + seconds, 0
                while clock() < deadline:
                    done = plain_loop(env, actions, warmup + count, 16, done)
                    count += 16
            conn.send(("done", (count, clock() - begin)))
        finally:
            env.close()
    except Exception as err:  # noqa: BLE001 -- reported by the parent as the backend's error
        conn.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def _receive(conn: Connection, expected: str, worker: int) -> Any:
    if not conn.poll(CEILING_TIMEOUT):
        raise TimeoutError(f"ceiling process {worker} sent nothing for {CEILING_TIMEOUT:g} s")
    kind, value = conn.recv()
    if kind == "error":
        raise RuntimeError(f"ceiling process {worker} failed: {value}")
    if kind != expected:
        raise RuntimeError(f"ceiling process {worker}: expected {expected!r}, got {kind!r}")
    return value


def ceiling_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    """N = usable CPUs processes, each stepping one env alone; rates summed.

    Each process does ``num_envs / N`` times a batched backend's rounds (with
    ``--steps``) or runs for the same time (with ``--seconds``).
    """
    processes = usable_cpu_count()
    flat = actions.per_env()
    context = multiprocessing.get_context("fork")
    started: List[Tuple[Any, Connection]] = []

    def close() -> None:
        for proc, conn in started:
            conn.close()
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        started.clear()

    def timed(plan: Plan) -> Tuple[int, float]:
        steps = (None if plan.steps is None
                 else math.ceil(plan.steps * num_envs / processes))
        for i in range(processes):
            parent, child = context.Pipe()
            proc = context.Process(
                target=_ceiling_worker, name=f"bench-ceiling-{i}", daemon=True,
                args=(child, workload, i, flat, plan.warmup * num_envs // processes,
                      steps, plan.seconds))
            proc.start()
            child.close()
            started.append((proc, parent))
        for i, (_, conn) in enumerate(started):
            _receive(conn, "ready", i)
        for _, conn in started:
            conn.send("go")
        counts = [_receive(conn, "done", i) for i, (_, conn) in enumerate(started)]
        env_steps = sum(count for count, _ in counts)
        rate = sum(count / seconds for count, seconds in counts)
        return env_steps, env_steps / rate

    return Runner(step=lambda k: None, close=close, timed=timed)


#: Seconds a ``bare_loop`` job may take before the backend reports its workers stuck.
BARE_LOOP_TIMEOUT = 60.0


def _bare_loop_worker(block: SharedBlock, index: int, parent: Optional[int], workload: str,
                     env_ids: List[int], actions: List[np.ndarray]) -> None:
    """A bare worker: builds its envs, then steps them all at each STEP job until
    CLOSE (or its parent's death)."""
    die_with_parent(parent)
    envs = [make_env(workload, i) for i in env_ids]
    for i, env in zip(env_ids, envs):
        env.reset(seed=ACTION_SEED + i)
    done = [False] * len(envs)
    port = block.worker_port(index, SPIN_ADAPTIVE)
    count = 0
    try:
        while True:
            job, _ = port.wait_job(1.0)
            if job == JobType.STEP:
                for k, env in enumerate(envs):
                    done[k] = plain_loop(env, actions, count + k, 1, done[k])
                count += len(envs)
                port.finish(JobStatus.OK)
            elif job == JobType.CLOSE:
                port.finish(JobStatus.OK)
                return
    finally:
        for env in envs:
            env.close()


def bare_loop_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    """The bare lockstep loop (see the module doc): one worker per usable CPU."""
    workers = min(usable_cpu_count(), num_envs)
    if num_envs % workers:
        raise Skip(f"the bare loop splits the envs evenly: {num_envs} envs over "
                   f"{workers} workers")
    per = num_envs // workers
    flat = actions.per_env()
    first = make_env(workload, 0)
    try:
        observation, _ = first.reset(seed=ACTION_SEED)
    finally:
        first.close()
    result: Tuple[np.ndarray, None, None, None, Dict[str, Any]] = (
        np.stack([np.asarray(observation)] * num_envs), None, None, None, {})
    block = SharedBlock([("unused", (1,), np.uint8)], num_rows=workers, num_workers=workers)
    controller = block.controller(SPIN_ADAPTIVE)
    ids = list(range(workers))
    pool = PoolPark()
    context = multiprocessing.get_context("fork")
    procs: List[Any] = []
    broken: List[str] = []  # what went wrong: the workers are then killed, not closed

    def run(job: JobType, timeout: float = BARE_LOOP_TIMEOUT) -> None:
        parked = pool.before_step()
        try:
            controller.post(ids, job, 0)
            status, _ = controller.wait(workers, timeout)
        finally:
            pool.after_step(parked)
        pool.returned()
        if status != WaitStatus.OK:
            broken.append(f"bare lockstep loop: a worker's {job.name} ended with {status}")
            raise RuntimeError(broken[-1])

    def close() -> None:
        if procs and not broken and len(procs) == workers:
            try:
                run(JobType.CLOSE, 5.0)
            except RuntimeError:
                pass  # a dead or stuck worker: killed below
        for proc in procs:
            proc.join(0.0 if broken else 5.0)  # broken: the others still wait for jobs
            if proc.is_alive():
                proc.kill()
                proc.join()
        procs.clear()
        block.close()

    def step(k: int) -> Any:
        run(JobType.STEP)
        return result

    try:
        parent = parent_death_plan("fork")
        for w in ids:
            proc = context.Process(
                target=_bare_loop_worker, name=f"bench-bare-loop-{w}", daemon=True,
                args=(block, w, parent, workload, list(range(w * per, (w + 1) * per)), flat))
            proc.start()
            procs.append(proc)
            assert proc.pid is not None  # started
            controller.set_worker_pid(w, proc.pid)
        run(JobType.STEP)  # every worker has built its envs
    except BaseException:
        close()
        raise
    return Runner(step=step, close=close)


def envpool_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    """EnvPool's version of the workload, one thread per usable CPU."""
    envpool_id = get_workload(workload).envpool_id
    if envpool_id is None:
        raise Skip("EnvPool has no version of this workload")
    if importlib.util.find_spec("envpool") is None:
        raise Skip("envpool is not installed (`pip install envpool` adds this row)")
    import envpool

    env = envpool.make_gymnasium(envpool_id, num_envs=num_envs, seed=ACTION_SEED,
                                 num_threads=min(usable_cpu_count(), num_envs))
    try:
        # The first reset builds its spaces; float64 Box bounds cast by gymnasium: harmless.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*precision lowered",
                                    category=UserWarning)
            env.reset()
    except BaseException:
        env.close()
        raise
    batches = actions.numpy
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close)
