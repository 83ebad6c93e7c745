"""How fast can a lockstep vector env with its envs in worker processes be here, under a load?

``FastVectorEnv`` and ``FastParallelEnvironment`` keep every env in a worker
process and wait for all of them at each step (lockstep). This script times an
idealized loop of that design against ``SyncVectorEnv`` in the same loop and
under the same condition, so that a target above what the ideal reaches is out
of reach for any front end of the design on this machine:

* ``bare``: W worker processes (forked; W = usable CPUs) own n / W envs each.
  At each step the trainer posts a STEP job to every worker through alf_env's
  native job board (the hand-off ``FastVectorEnv`` uses) and waits for all of
  them; each worker steps its envs with the workload's fixed actions (resetting
  an env whose episode ended) and reports done. Nothing else: no action or
  observation crosses, nothing is batched, no info is carried. A front end of
  this design does all of this and more.

  Variants: the workers pinned one per CPU (``bare_pinned``) or placed by the
  OS (``bare_os``, as ``FastVectorEnv``'s default). The *bound* of a repeat is
  its better variant.
* ``hybrid``: one worker process steps half the envs while the trainer steps the
  other half itself. alf_env has no such mode (an env in the trainer's process
  is not isolated from it); it shows what that design would give.
* ``fast_vector`` (``FastVectorEnv``) and ``gym_async`` (``AsyncVectorEnv``),
  with default arguments, for reference.
* ``ceiling`` (without a policy): ``alf-env-bench``'s ceiling, one env per
  usable CPU stepped in a process of its own with no hand-off, so that the
  bound's fraction of it bounds ``fast_vector/ceiling``.

Conditions (as ``alf-env-bench``'s options): ``--load N`` busy processes during
every measurement; ``--policy mlp`` a torch MLP's forward pass before every
step, at torch's default threads, on one fixed batch of the workload's
observations (the same in every loop).

Every loop runs ``--seconds`` after ``--warmup`` steps, the loops interleaved
in each of ``--repeats`` rounds; ratios to ``SyncVectorEnv`` (and to the
ceiling) are paired within a round.

``--alternate`` measures instead what ``fast_vector`` costs per step over the
bare loop it is bounded by (placed by the OS, as ``FastVectorEnv``'s default): one
trainer holds both and steps them in alternating blocks of ``--block`` steps
(a cycle: the policy's forward pass and the step), so a drift of the machine's
speed, which moves separate runs by 30%, hits both alike. Printed: the medians
over the blocks of each one's median cycle (µs) and of their difference.

Run:  python benchmarks/lockstep_bound.py [--workload CartPole-v1,HalfCheetah-v5,Pong]
      [--num-envs 8] [--load N] [--policy mlp] [--repeats 5] [--seconds 2]
      [--alternate [--blocks 200] [--block 32]]
"""

import argparse
import contextlib
import functools
import multiprocessing
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np

from alf_env import _penv
from alf_env.bench.core import Actions, Plan
from alf_env.bench.loads import POLICIES, BusyLoad, make_policy
from alf_env.bench.references import ceiling_runner, plain_loop
from alf_env.bench.report import fmt_paired, markdown_table
from alf_env.bench.workloads import make_env
from alf_env.control_plane.affinity import usable_cpus
from alf_env.data_plane.shared_block import SPIN_ADAPTIVE, SharedBlock

#: The loops whose better is the bound.
BARE = ("bare_pinned", "bare_os")
WAIT_S = 30.0  # a worker that does not answer in this long is reported stuck


class Stepper:
    """Steps a list of envs through a cycle of per-env actions (``plain_loop``)."""

    def __init__(self, workload: str, env_ids: Sequence[int], actions: List[np.ndarray]
                 ) -> None:
        self.envs = [make_env(workload, i) for i in env_ids]
        self.done = [False] * len(self.envs)
        self.actions = actions
        self.count = 0
        for i, env in zip(env_ids, self.envs):
            env.reset(seed=i)

    def step(self) -> None:
        """One step of every env."""
        for k, env in enumerate(self.envs):
            self.done[k] = plain_loop(env, self.actions, self.count + k, 1, self.done[k])
        self.count += len(self.envs)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _worker(block: SharedBlock, index: int, workload: str, env_ids: List[int],
            actions: List[np.ndarray], pinned: bool) -> None:
    """A bare worker: steps its envs for every STEP job, until CLOSE."""
    stepper = Stepper(workload, env_ids, actions)
    port = block.worker_port(index, SPIN_ADAPTIVE, pinned)
    while True:
        job, _ = port.wait_job(1.0)
        if job == _penv.JobType.STEP:
            stepper.step()
            port.finish(_penv.JobStatus.OK)
        elif job == _penv.JobType.CLOSE:
            port.finish(_penv.JobStatus.OK)
            stepper.close()
            return


class BareLockstep:
    """``num_workers`` bare workers own ``worker_envs`` envs each; the trainer
    steps ``own_envs`` itself between posting and waiting.

    Args:
        cpus: one CPU per worker (pinned), or ``None`` (the OS places them).
    """

    def __init__(self, workload: str, num_workers: int, worker_envs: int, own_envs: int,
                 actions: List[np.ndarray], cpus: Optional[List[int]]) -> None:
        self.block = SharedBlock([("x", (1,), np.float32)], num_rows=num_workers,
                                 num_workers=num_workers)
        self.controller = self.block.controller(SPIN_ADAPTIVE,
                                                workers_spread=cpus is not None)
        self.workers = list(range(num_workers))
        self.own = Stepper(workload, range(num_workers * worker_envs,
                                           num_workers * worker_envs + own_envs), actions)
        context = multiprocessing.get_context("fork")
        self.procs = []
        try:
            for w in self.workers:
                ids = list(range(w * worker_envs, (w + 1) * worker_envs))
                proc = context.Process(target=_worker, name=f"bound-worker-{w}", daemon=True,
                                       args=(self.block, w, workload, ids, actions,
                                             cpus is not None))
                proc.start()
                self.procs.append(proc)
                self.controller.set_worker_pid(w, proc.pid)
                if cpus is not None:
                    os.sched_setaffinity(proc.pid, {cpus[w % len(cpus)]})
            self.step()  # every worker has built its envs
        except BaseException:
            self.close()
            raise

    def step(self, job: Any = _penv.JobType.STEP) -> None:
        self.controller.post(self.workers, job, 0)
        if job == _penv.JobType.STEP:
            self.own.step()
        status, _ = self.controller.wait(len(self.workers), WAIT_S)
        if status != _penv.WaitStatus.OK:
            raise RuntimeError(f"lockstep bound: a worker's job ended with {status}")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            if all(p.is_alive() for p in self.procs) and len(self.procs) == len(self.workers):
                self.step(_penv.JobType.CLOSE)
        for proc in self.procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.own.close()
        self.block.close()


class VectorLoop:
    """A gymnasium vector env stepped through the workload's batches of actions."""

    def __init__(self, env: Any, batches: List[np.ndarray]) -> None:
        self.env = env
        self.batches = batches
        self.count = 0
        try:
            env.reset(seed=0)
        except BaseException:
            env.close()
            raise

    def step(self) -> None:
        self.env.step(self.batches[self.count % len(self.batches)])
        self.count += 1

    def close(self) -> None:
        self.env.close()


def bare_lockstep(workload: str, num_envs: int, actions: Actions
                  ) -> Callable[..., BareLockstep]:
    """``BareLockstep`` of ``num_envs`` envs, one worker per usable CPU; called with
    the CPUs to pin to (``None``: the OS places) and the options."""
    workers = len(usable_cpus())
    if num_envs % workers or num_envs % 2:
        raise ValueError(f"--num-envs: expected a multiple of {workers} and of 2, "
                         f"got {num_envs}")
    return functools.partial(BareLockstep, workload, workers, num_envs // workers, 0,
                             actions.per_env())


def loops(workload: str, num_envs: int, actions: Actions) -> Dict[str, Callable[[], Any]]:
    """The constructors of every loop of one workload, by name."""
    from alf_env.vector import FastVectorEnv

    fns = [functools.partial(make_env, workload, i) for i in range(num_envs)]
    cpus = usable_cpus()
    bare = bare_lockstep(workload, num_envs, actions)
    flat = actions.per_env()
    made: Dict[str, Callable[[], Any]] = {
        "gym_sync": lambda: VectorLoop(gym.vector.SyncVectorEnv(fns), actions.numpy),
        "gym_async": lambda: VectorLoop(gym.vector.AsyncVectorEnv(fns), actions.numpy),
        "fast_vector": lambda: VectorLoop(FastVectorEnv(fns), actions.numpy),
        "bare_pinned": lambda: bare(cpus),
        "bare_os": lambda: bare(None),
        "hybrid": lambda: BareLockstep(workload, 1, num_envs // 2, num_envs // 2, flat, None),
    }
    return made


def observations(workload: str, num_envs: int) -> np.ndarray:
    """A batch of the workload's first observations (what the policy runs on)."""
    env = make_env(workload, 0)
    try:
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    return np.stack([np.asarray(obs)] * num_envs)


def timed(make: Callable[[], Any], policy: Optional[Callable[[Any], None]], obs: np.ndarray,
          warmup: int, seconds: float) -> float:
    """Batched steps per second of one loop (the policy's forward pass before each)."""
    loop = make()
    try:
        for _ in range(warmup):
            if policy is not None:
                policy(obs)
            loop.step()
        steps, begin = 0, time.perf_counter()
        while True:
            for _ in range(16):
                if policy is not None:
                    policy(obs)
                loop.step()
            steps += 16
            elapsed = time.perf_counter() - begin
            if elapsed >= seconds:
                return steps / elapsed
    finally:
        loop.close()


def ceiling_rate(workload: str, num_envs: int, actions: Actions, warmup: int,
                 seconds: float) -> float:
    """Env-steps/s of ``alf-env-bench``'s ``ceiling``: one env per usable CPU,
    each in a process of its own, stepped with no hand-off at all."""
    runner = ceiling_runner(workload, num_envs, actions)
    try:
        assert runner.timed is not None
        env_steps, elapsed = runner.timed(Plan(warmup=warmup, steps=None, seconds=seconds))
    finally:
        runner.close()
    return env_steps / elapsed


def measure(workload: str, num_envs: int, policy_name: str, repeats: int, warmup: int,
            seconds: float, progress: Callable[[str], None] = lambda line: None
            ) -> Dict[str, List[float]]:
    """Env-steps/s of every loop of ``workload``, ``repeats`` interleaved rounds."""
    policy = make_policy(policy_name, None)
    actions = Actions.make(workload, num_envs)
    obs = observations(workload, num_envs)

    def env_steps_per_s(make: Callable[[], Any]) -> float:
        return num_envs * timed(make, policy, obs, warmup, seconds)

    rate_of: Dict[str, Callable[[], float]] = {
        name: functools.partial(env_steps_per_s, make)
        for name, make in loops(workload, num_envs, actions).items()}
    if policy is None:  # the ceiling's loop has no place for a policy
        rate_of["ceiling"] = functools.partial(ceiling_rate, workload, num_envs, actions,
                                               warmup, seconds)
    rates: Dict[str, List[float]] = {name: [] for name in rate_of}
    for r in range(repeats):
        for name, rate in rate_of.items():
            rates[name].append(rate())
            progress(f"{workload} round {r + 1}/{repeats} {name}: "
                     f"{rates[name][-1]:,.0f} env-steps/s")
    rates["bound"] = [max(rates[name][r] for name in BARE if name in rates)
                      for r in range(repeats)]
    return rates


def alternate(workload: str, num_envs: int, policy_name: str, blocks: int, block: int,
              warmup: int) -> Dict[str, float]:
    """µs per cycle of ``fast_vector`` and of the bare loop, stepped by one trainer in
    ``blocks`` alternating blocks of ``block`` cycles each (after ``warmup`` cycles of
    each).

    Returns:
        ``fast_vector``, ``bare``: the median over the blocks of each one's median
        cycle; ``difference``: the median over the blocks of the difference of the
        two, that is what ``fast_vector`` adds to the bare loop's cycle.
    """
    policy = make_policy(policy_name, None)
    actions = Actions.make(workload, num_envs)
    obs = observations(workload, num_envs)
    make_bare = bare_lockstep(workload, num_envs, actions)
    fast = loops(workload, num_envs, actions)["fast_vector"]()
    try:
        bare = make_bare(None)
    except BaseException:
        fast.close()
        raise

    def cycles(loop: Any, count: int) -> List[float]:
        times = []
        for _ in range(count):
            begin = time.perf_counter()
            if policy is not None:
                policy(obs)
            loop.step()
            times.append(time.perf_counter() - begin)
        return times

    medians: Dict[str, List[float]] = {"fast_vector": [], "bare": [], "difference": []}
    try:
        cycles(fast, warmup)
        cycles(bare, warmup)
        for _ in range(blocks):
            fast_s = statistics.median(cycles(fast, block))
            bare_s = statistics.median(cycles(bare, block))
            medians["fast_vector"].append(fast_s)
            medians["bare"].append(bare_s)
            medians["difference"].append(fast_s - bare_s)
    finally:
        fast.close()
        bare.close()
    return {name: 1e6 * statistics.median(values) for name, values in medians.items()}


def report(results: Dict[str, Dict[str, List[float]]], out: Any) -> None:
    """Writes env-steps/s (medians) and ratios to gym_sync (paired, median (min - max))."""
    names = [n for n in next(iter(results.values())) if n != "gym_sync"]
    rows = [[workload] + [f"{statistics.median(rates[n]):,.0f}" for n in ["gym_sync"] + names]
            for workload, rates in results.items()]
    out.write("Env-steps/s (median)\n\n")
    out.write(markdown_table(["workload", "gym_sync"] + names, rows))
    for reference in ("gym_sync", "ceiling"):
        if reference not in next(iter(results.values())):
            continue
        others = [n for n in names if n != reference]
        ratios = [[workload] + [fmt_paired([a / b for a, b in zip(rates[n], rates[reference])])
                                for n in others]
                  for workload, rates in results.items()]
        out.write(f"\n\nx {reference} (paired, median (min - max))\n\n")
        out.write(markdown_table(["workload"] + others, ratios))
    out.write("\n")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="CartPole-v1,HalfCheetah-v5,Pong",
                        help="comma-separated workloads (alf-env-bench names)")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the loops")
    parser.add_argument("--policy", choices=POLICIES, default="none")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--alternate", action="store_true",
                        help="fast_vector's cost per step over the bare loop, in one trainer")
    parser.add_argument("--blocks", type=int, default=200, help="with --alternate")
    parser.add_argument("--block", type=int, default=32, help="cycles per block (--alternate)")
    args = parser.parse_args(argv)
    if args.alternate:
        with BusyLoad(args.load):
            rows = []
            for w in args.workload.split(","):
                us = alternate(w, args.num_envs, args.policy, args.blocks, args.block,
                               args.warmup)
                rows.append([w] + [f"{us[n]:.0f}" for n in ("fast_vector", "bare", "difference")]
                            + [f"{us['bare'] / us['fast_vector']:.2f}"])
        print(f"fast_vector against the bare loop, alternating blocks of {args.block}, "
              f"{args.num_envs} envs, load {args.load}, policy {args.policy} (µs per cycle)\n")
        print(markdown_table(["workload", "fast_vector", "bare", "difference",
                              "bare / fast_vector"], rows))
        return 0
    with BusyLoad(args.load):
        results = {w: measure(w, args.num_envs, args.policy, args.repeats, args.warmup,
                              args.seconds, lambda line: print(line, file=sys.stderr,
                                                               flush=True))
                   for w in args.workload.split(",")}
    print(f"Lockstep bound, {args.num_envs} envs, load {args.load}, policy {args.policy}\n")
    report(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
