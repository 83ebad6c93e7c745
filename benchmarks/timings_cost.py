"""What does leaving ``timings()`` on cost a ``FastVectorEnv`` step?

The workers always count every env step, time one in ``StepClock.SAMPLE_EVERY``
and stamp their jobs. This script builds two ``FastVectorEnv`` s of the same envs
in one trainer: one as users get it (``--every N`` sets its sample period), one
whose workers were forked with the per-env clock replaced by no-ops. Both pin
their workers the same way (``worker_cpus``): left to the OS, one of two equal
envs in one trainer often runs 1.4x slower than the other for its whole life.
The trainer steps them in alternating blocks of ``--block`` steps, so the
machine's drift hits both alike, and prints the medians over the blocks of each
one's median step (µs), of their difference, and the cost as a fraction of the
untimed step, for ``--repeats`` fresh processes.

Run:  python benchmarks/timings_cost.py [--workload CartPole-v1] [--num-envs 8]
      [--every 8] [--blocks 200] [--block 32] [--repeats 5] [--json out.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

import numpy as np


def measure(workload: str, num_envs: int, blocks: int, block: int, every: int = 0,
            warmup: int = 500) -> Dict[str, float]:
    """µs per step of the timed and the untimed env (medians over the blocks)."""
    from alf_env.bench.core import Actions
    from alf_env.bench.workloads import make_env
    from alf_env.control_plane.step_timings import StepClock
    from alf_env.front_ends.gym.vector_env import FastVectorEnv

    actions = Actions.make(workload, num_envs).numpy
    fns = [lambda i=i: make_env(workload, i) for i in range(num_envs)]
    cpus = sorted(os.sched_getaffinity(0))
    tick, reader, commit = StepClock.tick, StepClock.reader, StepClock.commit
    period = StepClock.SAMPLE_EVERY
    # Each env's workers are forked with the class as it is then, and keep it.
    StepClock.SAMPLE_EVERY = every or period
    try:
        timed = FastVectorEnv(fns, context="fork", worker_cpus=cpus)
    finally:
        StepClock.SAMPLE_EVERY = period
    StepClock.tick = lambda self: False  # type: ignore[method-assign]
    StepClock.reader = lambda self: int  # type: ignore[method-assign]  # int() is 0
    StepClock.commit = lambda self: None  # type: ignore[method-assign]
    try:
        untimed = FastVectorEnv(fns, context="fork", worker_cpus=cpus)
    except BaseException:
        timed.close()
        raise
    finally:
        StepClock.tick, StepClock.reader, StepClock.commit = (  # type: ignore[method-assign]
            tick, reader, commit)
    envs = {"timed": timed, "untimed": untimed}
    count = 0

    def steps(env: FastVectorEnv, n: int) -> List[float]:
        nonlocal count
        times = []
        for _ in range(n):
            begin = time.perf_counter()
            env.step(actions[count % len(actions)])
            times.append(time.perf_counter() - begin)
            count += 1
        return times

    medians: Dict[str, List[float]] = {"timed": [], "untimed": [], "difference": []}
    try:
        for env in envs.values():
            env.reset(seed=0)
            steps(env, warmup)
        for _ in range(blocks):
            timed_s = statistics.median(steps(timed, block))
            untimed_s = statistics.median(steps(untimed, block))
            medians["timed"].append(timed_s)
            medians["untimed"].append(untimed_s)
            medians["difference"].append(timed_s - untimed_s)
    finally:
        for env in envs.values():
            env.close()
    out = {name: 1e6 * statistics.median(values) for name, values in medians.items()}
    out["cost"] = out["difference"] / out["untimed"]
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=int, default=0,
                        help="time one step in this many (0: StepClock.SAMPLE_EVERY)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.workload, args.num_envs, args.blocks, args.block,
                                 args.every)))
        return 0
    runs = []
    for r in range(args.repeats):
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--workload", args.workload,
             "--num-envs", str(args.num_envs), "--blocks", str(args.blocks),
             "--block", str(args.block), "--every", str(args.every)],
            capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"repeat {r + 1} failed:\n{done.stderr[-2000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        figures = runs[-1]
        print(f"{args.workload} repeat {r + 1}: timed {figures['timed']:.1f} us, untimed "
              f"{figures['untimed']:.1f} us a step, difference {figures['difference']:+.2f} us "
              f"({100 * figures['cost']:+.1f}%)", flush=True)
    costs = [run["cost"] for run in runs]
    print(f"cost of the timings: median {100 * float(np.median(costs)):+.1f}% "
          f"({100 * min(costs):+.1f}% to {100 * max(costs):+.1f}%) of the untimed step")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"workload": args.workload, "num_envs": args.num_envs,
                       "every": args.every,
                       "blocks": args.blocks, "block": args.block, "runs": runs}, out,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
