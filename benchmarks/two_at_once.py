"""Two trainings on one machine: two FastVectorEnv loops at once against one alone.

Usage::

    python benchmarks/two_at_once.py --env HalfCheetah-v5 --repeats 5

Each measurement starts one or two processes that build ``FastVectorEnv`` (its
defaults, ``--num-envs`` envs), warm up, then step together from the same
moment for ``--seconds``. "alone" and "pair" alternate, ``--repeats`` times
each. Prints each measurement and, per repeat, the pair's summed env-steps/s
over the one alone (its median is the figure in docs/benchmarks.md).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import List, Optional, Sequence

#: Seconds between starting the processes and their common start of stepping
#: (enough to build and warm up the env).
START_DELAY_S = 4.0
#: Untimed steps after reset.
WARMUP = 50


def run_child(env_id: str, num_envs: int, start_at: float, seconds: float) -> float:
    """Steps one FastVectorEnv from ``start_at`` (epoch s) for ``seconds``; env-steps/s."""
    import gymnasium as gym

    from alf_env.vector import FastVectorEnv

    env = FastVectorEnv([lambda: gym.make(env_id)] * num_envs)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(64)]
        for k in range(WARMUP):
            env.step(actions[k % len(actions)])
        time.sleep(max(start_at - time.time(), 0.0))
        begin, steps = time.perf_counter(), 0
        while time.perf_counter() - begin < seconds:
            env.step(actions[steps % len(actions)])
            steps += 1
        return num_envs * steps / (time.perf_counter() - begin)
    finally:
        env.close()


def measure(env_id: str, num_envs: int, processes: int, seconds: float,
            delay_s: float = START_DELAY_S) -> List[float]:
    """The env-steps/s of ``processes`` loops run at once, one per process."""
    start_at = time.time() + delay_s
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(start_at), "--env",
                               env_id, "--num-envs", str(num_envs), "--seconds", str(seconds)],
                              stdout=subprocess.PIPE, text=True)
             for _ in range(processes)]
    rates = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"a measuring process exited with code {proc.returncode}")
        rates.append(float(out.strip().splitlines()[-1]))
    return rates


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v5", help="a gymnasium id")
    parser.add_argument("--num-envs", type=int, default=8, help="envs per FastVectorEnv")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per run")
    parser.add_argument("--repeats", type=int, default=5, help="alone/pair alternations")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(run_child(args.env, args.num_envs, args.child, args.seconds))
        return 0
    alone: List[float] = []
    pair: List[float] = []
    for r in range(args.repeats):
        for kind in (("alone", "pair") if r % 2 == 0 else ("pair", "alone")):
            rates = measure(args.env, args.num_envs, 1 if kind == "alone" else 2, args.seconds)
            (alone if kind == "alone" else pair).append(sum(rates))
            print(kind, " + ".join(f"{x:,.0f}" for x in rates), flush=True)
    ratios = [p / a for p, a in zip(pair, alone)]
    print(json.dumps({"alone": alone, "pair_sum": pair, "ratios": ratios}))
    print(f"pair / alone: {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
