"""What does each front end's worker cost per job over its envs' own steps?

A lockstep step's wall time is mostly its workers' job. In one process, this
runs the STEP job of one worker of ``FastVectorEnv`` (``GymRowsHandler`` over a
``GymEnvBatch``) and of ``FastParallelEnvironment`` (``AlfRowsHandler`` over an
``AlfEnvBatch`` of ``AlfGymWrapper`` s), each on shared rows of its own, beside
a bare loop of as many envs of the workload, all stepped with the same
actions: no process and no hand-off, only the Python each worker runs around
the envs' steps (and the one copy that writes each job's actions). They run in alternating
blocks of ``--block`` jobs, so the machine's drift (30% within minutes) hits
them alike. Printed, for each of ``--repeats`` fresh processes: the median µs
of a job of each, and its ratio to the bare loop's (paired per block).

Run:  python benchmarks/worker_cost.py [--workload CartPole-v1] [--envs 4]
      [--blocks 100] [--block 50] [--repeats 5] [--json out.json]
"""

import argparse
import functools
import json
import multiprocessing
import statistics
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List, Optional

import numpy as np

#: The jobs timed, in the order they run in each block.
JOBS = ("bare", "fast_vector", "fast_parallel")


def _bare_job(workload: str, envs: int) -> Callable[[], None]:
    """Steps ``envs`` envs of ``workload`` once each (a reset after an end)."""
    from alf_env.bench.core import Actions
    from alf_env.bench.references import plain_loop
    from alf_env.bench.workloads import make_env

    made = [make_env(workload, i) for i in range(envs)]
    for i, env in enumerate(made):
        env.reset(seed=i)
    actions = Actions.make(workload, envs).per_env()
    done = [False] * envs
    count = 0

    def job() -> None:
        nonlocal count
        for k, env in enumerate(made):
            done[k] = plain_loop(env, actions, count + k, 1, done[k])
        count += envs
    return job


def _job_of(handler: Any, write_actions: Callable[[np.ndarray], None],
            workload: str, envs: int) -> Callable[[], None]:
    """A bound handler's STEP job, as its worker runs it (the step, then
    ``after_step``), after a reset. Each job first writes the next batch of the
    workload's actions into the rows (one copy, as the trainer's step does),
    so the envs step as the bare loop's do: an env's step may cost more or
    less with other actions, and an action that ends episodes early adds
    resets."""
    from alf_env.bench.core import Actions

    batches = Actions.make(workload, envs).numpy
    handler.reset(0)
    after_step = handler.after_step
    count = 0

    def job() -> None:
        nonlocal count
        write_actions(batches[count % len(batches)])
        count += 1
        handler.step(0)
        after_step()
    return job


def _drain(conn: Connection) -> None:
    """Reads and drops what the other end sends, until it is closed."""
    try:
        while True:
            conn.recv_bytes()
    except (EOFError, OSError):
        pass


def _fast_vector_job(workload: str, envs: int) -> Callable[[], None]:
    """One STEP job of a FastVectorEnv worker hosting ``envs`` envs."""
    from gymnasium.vector import AutoresetMode

    from alf_env.bench.workloads import make_env
    from alf_env.data_plane.shared_block import SharedBlock
    from alf_env.front_ends.gym.action_items import action_layout
    from alf_env.front_ends.gym.gym_rows import GymEnvBatch, GymRowsHandler, block_fields
    from alf_env.front_ends.gym.space_layout import SpaceLayout

    group = GymEnvBatch([functools.partial(make_env, workload, i) for i in range(envs)], 0)
    space = group.envs[0]
    observation = SpaceLayout(space.observation_space, "obs", "observation")
    action = action_layout(space.action_space)
    info_bytes = 1024
    block = SharedBlock(block_fields(observation, action, info_bytes), num_rows=envs,
                        num_workers=1)
    # The worker reports each new info layout on its pipe: a thread drains it
    # (blocked in a read, it holds no GIL while the jobs run).
    parent, child = multiprocessing.Pipe()
    threading.Thread(target=_drain, args=(parent,), daemon=True).start()
    handler = GymRowsHandler((0, envs), observation, action, AutoresetMode.NEXT_STEP,
                             info_bytes)(group, block, child, 0)
    write = action.exact_batch_writer(action.views(block.views), slice(0, envs), envs)
    assert write is not None  # an action space of one array

    def write_actions(batch: np.ndarray) -> None:
        assert write(batch)
    return _job_of(handler, write_actions, workload, envs)


def _fast_parallel_job(workload: str, envs: int) -> Callable[[], None]:
    """One STEP job of a FastParallelEnvironment worker hosting ``envs`` envs."""
    from alf_env.bench.workloads import make_env
    from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
    from alf_env.front_ends.alf.alf_rows import AlfRowsHandler
    from alf_env.front_ends.alf.env_batch import AlfEnvBatch
    from alf_env.front_ends.alf.fast_parallel_environment import SlotRows
    from alf_env.front_ends.alf.workers import BatchSpecs

    group = AlfEnvBatch([functools.partial(lambda i: AlfGymWrapper(make_env(workload, i),
                                                                   env_id=i), i)
                         for i in range(envs)], 0)
    specs = BatchSpecs.of(group, envs)
    rows = SlotRows(specs, 1, [0], zero_copy=False)
    handler = AlfRowsHandler((0, envs), rows.action_names, rows.time_step_names,
                             grouped=True)(group, rows.block, None, 0)  # type: ignore[arg-type]
    return _job_of(handler, lambda batch: rows.write_actions([batch]), workload, envs)


def measure(workload: str, envs: int, blocks: int, block: int,
            warmup: int = 200) -> Dict[str, float]:
    """Median µs of a job of each of :data:`JOBS`, and each one's paired ratio to
    the bare loop's."""
    makers = {"bare": _bare_job, "fast_vector": _fast_vector_job,
              "fast_parallel": _fast_parallel_job}
    jobs = {name: makers[name](workload, envs) for name in JOBS}
    for job in jobs.values():
        for _ in range(warmup):
            job()
    per_block: Dict[str, List[float]] = {name: [] for name in JOBS}
    for _ in range(blocks):
        for name, job in jobs.items():
            begin = time.perf_counter()
            for _ in range(block):
                job()
            per_block[name].append((time.perf_counter() - begin) / block)
    out = {name: 1e6 * statistics.median(times) for name, times in per_block.items()}
    for name in JOBS[1:]:
        out[f"{name}/bare"] = statistics.median(
            t / b for t, b in zip(per_block[name], per_block["bare"]))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="CartPole-v1")
    parser.add_argument("--envs", type=int, default=4, help="envs of the worker")
    parser.add_argument("--blocks", type=int, default=100)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.workload, args.envs, args.blocks, args.block)))
        return 0
    runs: List[Dict[str, Any]] = []
    for r in range(args.repeats):
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--workload", args.workload,
             "--envs", str(args.envs), "--blocks", str(args.blocks),
             "--block", str(args.block)],
            capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"repeat {r + 1} failed:\n{done.stderr[-2000:]}")
        runs.append(f := json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{args.workload}, {args.envs} envs, repeat {r + 1}: a job takes "
              + ", ".join(f"{name} {f[name]:.1f} us" for name in JOBS)
              + f"; over the bare loop: FastVectorEnv's worker {f['fast_vector/bare']:.2f}x, "
              f"FastParallelEnvironment's {f['fast_parallel/bare']:.2f}x", flush=True)
    for name in ("fast_vector/bare", "fast_parallel/bare"):
        ratios = [run[name] for run in runs]
        print(f"{name}: median {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f} - {max(ratios):.2f})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"workload": args.workload, "envs": args.envs, "blocks": args.blocks,
                       "block": args.block, "runs": runs}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
