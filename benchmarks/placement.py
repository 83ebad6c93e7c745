"""Worker placement and scheduling: one front end with several option sets, measured
interleaved.

Builds every variant of one front end at once (each its own workers) and
steps them in turn, ``--seconds`` each, for ``--repeats`` rounds (the order
alternates per round), so that machine noise hits all of them alike. Prints
env-steps/s (median) and the paired ratio to the first variant, median
(min-max). This is how docs/benchmarks.md ("Worker placement") compared
``worker_cpus`` on the asynchronous mode and the pipe path, which have no
``alf-env-bench`` row of their own.

Run:  python benchmarks/placement.py --front vector --workload CartPole-v1 \\
          --variants '{"os": {"batch_size": 4, "worker_cpus": null},
                       "spread": {"batch_size": 4, "worker_cpus": "spread"}}'

``--front``: ``vector`` (FastVectorEnv), ``fast`` (FastParallelEnvironment) or
``parallel`` (ParallelAlfEnvironment). In FastVectorEnv's asynchronous mode a
step returns ``batch_size`` envs, and that is what is counted.

A variant may also give ``"worker_policy": "other"`` or ``"batch"``: the
scheduling policy the workers are switched to once built (their own default is
``SCHED_BATCH`` for ``parallel``, ``SCHED_OTHER`` for the shared-memory front
ends). This is how docs/benchmarks.md ("Worker scheduling policy") compared
``SCHED_BATCH`` workers with normal ones:

      python benchmarks/placement.py --front parallel --workload Pong \
          --variants '{"other": {"worker_policy": "other"}, "batch": {}}'
"""

import argparse
import functools
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

from alf_env.bench.backends import _alf_env, env_fns

NUM_ACTIONS = 16
#: ``worker_policy`` values and the Linux scheduling policies they set.
POLICIES = {"other": os.SCHED_OTHER, "batch": os.SCHED_BATCH}


def _build(front: str, workload: str, num_envs: int, kwargs: Dict[str, Any]
           ) -> Callable[[int], int]:
    """Builds one variant; returns ``step(k) -> env-steps done`` (with ``.close``)."""
    kwargs = dict(kwargs)
    policy = kwargs.pop("worker_policy", None)
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"worker_policy: expected one of {sorted(POLICIES)}, got {policy!r}")
    if front == "vector":
        from alf_env.vector import FastVectorEnv
        env = FastVectorEnv(env_fns(workload, num_envs), **kwargs)
        env.reset(seed=0)
        space = env.action_space
        space.seed(0)
        actions = [space.sample() for _ in range(NUM_ACTIONS)]
        rows = env.batch_size
        pids = env.worker_pids()

        def step(k: int) -> int:
            env.step(actions[k % NUM_ACTIONS])
            return rows
    elif front in ("fast", "parallel"):
        from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
        from alf_env.environments.parallel_environment import ParallelAlfEnvironment
        cls = FastParallelEnvironment if front == "fast" else ParallelAlfEnvironment
        env = cls([functools.partial(_alf_env, workload, i) for i in range(num_envs)],
                  **kwargs)
        action = env.reset().prev_action  # a valid batched action
        pids = [worker.pid for worker in env._envs]

        def step(k: int) -> int:
            env.step(action)
            return num_envs
    else:
        raise ValueError(f"--front: expected vector, fast or parallel, got {front!r}")
    if policy is not None:
        for pid in pids:
            os.sched_setscheduler(pid, POLICIES[policy], os.sched_param(0))
    step.close = env.close  # type: ignore[attr-defined]
    return step


def compare(front: str, workload: str, variants: Dict[str, Dict[str, Any]],
            num_envs: int = 8, repeats: int = 5, seconds: float = 1.0
            ) -> Dict[str, List[float]]:
    """env-steps/s of each variant per repeat (after one unmeasured warm-up round)."""
    if not variants:
        raise ValueError("--variants: expected at least one variant")
    steps = {}
    try:
        for name, kwargs in variants.items():
            steps[name] = _build(front, workload, num_envs, kwargs)
        rates: Dict[str, List[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(repeats + 1):
            for name in (names if r % 2 == 0 else names[::-1]):
                step, k, done = steps[name], 0, 0
                start = time.perf_counter()
                end = start + seconds
                while True:
                    done += step(k)
                    k += 1
                    if k % 8 == 0 and time.perf_counter() > end:
                        break
                if r:  # round 0 warms up
                    rates[name].append(done / (time.perf_counter() - start))
        return rates
    finally:
        for step in steps.values():
            step.close()


def report(rates: Dict[str, List[float]]) -> str:
    """One line per variant: median env-steps/s and the paired ratio to the first."""
    base = rates[next(iter(rates))]
    lines = []
    for name, values in rates.items():
        ratios = [a / b for a, b in zip(values, base)]
        lines.append(f"{name:>12}  {statistics.median(values):>12,.0f} env-steps/s  "
                     f"x first: {statistics.median(ratios):.2f} "
                     f"({min(ratios):.2f}-{max(ratios):.2f})")
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--front", choices=("vector", "fast", "parallel"), default="vector")
    parser.add_argument("--workload", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--variants", required=True,
                        help="JSON object: variant name -> keyword arguments")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    try:
        variants = json.loads(args.variants)
    except json.JSONDecodeError as err:
        parser.error(f"--variants: expected a JSON object, got {args.variants!r} ({err})")
    if not isinstance(variants, dict) or not all(isinstance(v, dict)
                                                 for v in variants.values()):
        parser.error(f"--variants: expected a JSON object of objects, got {args.variants!r}")
    rates = compare(args.front, args.workload, variants, args.num_envs, args.repeats,
                    args.seconds)
    print(f"{args.front} {args.workload} x{args.num_envs}, {args.repeats} repeats of "
          f"{args.seconds} s")
    print(report(rates))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main(sys.argv[1:]))
