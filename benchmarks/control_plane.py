"""Control-plane benchmark: pipe round trips and pipe-batched throughput.

Measures, on this machine:
  1. the median round-trip time of one ``ProcessEnvironment.step`` on the
     trivial W1 env (float32[4] observation), for each start method;
  2. env-steps/s of ``ParallelAlfEnvironment`` with 8 CartPole-v1 envs.

Run:  python benchmarks/control_plane.py [--steps N] [--repeats R] [--json FILE]
"""

import argparse
import functools
import json
import statistics
import sys
import time

import numpy as np
import torch

from alf_env.environments import suite_gym
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.workloads import TrivialEnv


def trivial_env(env_id: int = 0) -> AlfGymWrapper:
    return AlfGymWrapper(TrivialEnv(env_id=env_id), env_id=env_id)


def step_round_trip(start_method: str, flatten: bool, steps: int) -> float:
    """Median seconds of one blocking ``ProcessEnvironment.step``."""
    env = ProcessEnvironment(trivial_env, env_id=0, flatten=flatten,
                             start_method=start_method)
    env.start()
    try:
        action = np.int64(1)
        env.reset()
        for _ in range(100):  # warm up
            env.step(action)
        times = []
        for _ in range(steps):
            begin = time.perf_counter()
            env.step(action)
            times.append(time.perf_counter() - begin)
        return statistics.median(times)
    finally:
        env.close()


def parallel_throughput(num_envs: int, steps: int) -> float:
    """env-steps/s of ParallelAlfEnvironment over ``num_envs`` CartPole-v1 envs."""
    ctors = [functools.partial(suite_gym.load, "CartPole-v1", env_id=i)
             for i in range(num_envs)]
    with ParallelAlfEnvironment(ctors) as env:
        env.reset()
        torch.manual_seed(0)
        actions = [env.action_spec().sample((env.batch_size,)) for _ in range(16)]
        for i in range(50):
            env.step(actions[i % 16])
        begin = time.perf_counter()
        for i in range(steps):
            env.step(actions[i % 16])
        return steps * env.batch_size / (time.perf_counter() - begin)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write results here")
    args = parser.parse_args()
    results = {"round_trip_us": {}, "parallel_cartpole_8": {}}
    for start_method in ("fork", "spawn", "forkserver"):
        for flatten in (False, True):
            key = f"{start_method}, flatten={flatten}"
            runs = [step_round_trip(start_method, flatten, args.steps)
                    for _ in range(args.repeats)]
            results["round_trip_us"][key] = [r * 1e6 for r in runs]
    runs = [parallel_throughput(8, args.steps // 3) for _ in range(args.repeats)]
    results["parallel_cartpole_8"] = runs
    out = sys.stdout
    out.write("ProcessEnvironment.step round trip, trivial env (median of "
              f"{args.steps} steps; median [min-max] over {args.repeats} runs)\n\n")
    out.write("| start method, flatten | round trip (us) |\n|---|---|\n")
    for key, runs in results["round_trip_us"].items():
        out.write(f"| {key} | {statistics.median(runs):.0f} "
                  f"[{min(runs):.0f}-{max(runs):.0f}] |\n")
    runs = results["parallel_cartpole_8"]
    out.write(f"\nParallelAlfEnvironment, 8 x CartPole-v1: {statistics.median(runs):,.0f} "
              f"env-steps/s [{min(runs):,.0f}-{max(runs):,.0f}]\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
