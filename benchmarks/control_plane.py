"""Control-plane benchmark: pipe round trips and pipe-batched throughput.

Measures, on this machine:
  1. the median round-trip time of one ``ProcessEnvironment.step`` on the
     trivial W1 env (float32[4] observation), for each start method;
  2. env-steps/s of ``ParallelAlfEnvironment`` with 8 CartPole-v1 envs;
  3. the ``ProcessEnvironment.step`` round trip on CartPole-v1 (fork) against
     its floor: a bare ``multiprocessing.Pipe`` round trip (the action out, a
     real CartPole ``TimeStep`` back, a plain echo loop in the child) plus the
     same env's step in this process. The project's target: the ratio is at
     most 1.3. Each repeat measures the three medians back to back; the ratio
     is reported as median (min-max) over repeats.

Run:  python benchmarks/control_plane.py [--steps N] [--repeats R] [--json FILE]
"""

import argparse
import functools
import json
import multiprocessing
import statistics
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List

import numpy as np
import torch

from alf_env.environments import suite_gym
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.synthetic_envs import TrivialEnv

#: The target: ``ProcessEnvironment.step`` <= this x (bare Pipe round trip + in-process step).
ROUND_TRIP_TARGET = 1.3
WARMUP = 100


def trivial_env(env_id: int = 0) -> AlfGymWrapper:
    return AlfGymWrapper(TrivialEnv(env_id=env_id), env_id=env_id)


def cartpole_env(env_id: int = 0) -> Any:
    return suite_gym.load("CartPole-v1", env_id=env_id)


def _median_seconds(call: Callable[[], Any], steps: int) -> float:
    """Median seconds of ``call()`` after :data:`WARMUP` untimed calls."""
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(steps):
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def step_round_trip(start_method: str, flatten: bool, steps: int,
                    env_ctor: Callable[..., Any] = trivial_env) -> float:
    """Median seconds of one blocking ``ProcessEnvironment.step``."""
    env = ProcessEnvironment(env_ctor, env_id=0, flatten=flatten,
                             start_method=start_method)
    env.start()
    try:
        action = np.int64(1)
        env.reset()
        return _median_seconds(lambda: env.step(action), steps)
    finally:
        env.close()


def in_process_step(steps: int, env_ctor: Callable[..., Any] = cartpole_env) -> float:
    """Median seconds of one ``step`` of the env in this process."""
    env = env_ctor(env_id=0)
    try:
        action = np.int64(1)
        env.reset()
        return _median_seconds(lambda: env.step(action), steps)
    finally:
        env.close()


def _echo(conn: Connection, env_ctor: Callable[..., Any]) -> None:
    """The bare pipe's child: answers every message with one real time step."""
    env = env_ctor(env_id=0)
    env.reset()
    reply = env.step(np.int64(1))
    env.close()
    try:
        while conn.recv() is not None:
            conn.send(reply)
    finally:
        conn.close()


def pipe_round_trip(steps: int, env_ctor: Callable[..., Any] = cartpole_env) -> float:
    """Median seconds of a bare ``multiprocessing.Pipe`` round trip (fork): the
    action out, a time step of the env back, nothing else done in the child."""
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    proc = context.Process(target=_echo, args=(child, env_ctor), daemon=True)
    proc.start()
    child.close()
    action = np.int64(1)

    def round_trip() -> None:
        parent.send(action)
        parent.recv()

    try:
        return _median_seconds(round_trip, steps)
    finally:
        parent.send(None)
        parent.close()
        proc.join(10)


def round_trip_ratio(steps: int, repeats: int) -> Dict[str, List[float]]:
    """Per repeat: the three medians (µs) on CartPole-v1 and the ratio
    ``ProcessEnvironment.step / (pipe round trip + in-process step)``."""
    out: Dict[str, List[float]] = {"process_environment_us": [], "pipe_us": [],
                                   "in_process_us": [], "ratio": []}
    for _ in range(repeats):
        process = step_round_trip("fork", False, steps, cartpole_env)
        pipe = pipe_round_trip(steps)
        local = in_process_step(steps)
        out["process_environment_us"].append(process * 1e6)
        out["pipe_us"].append(pipe * 1e6)
        out["in_process_us"].append(local * 1e6)
        out["ratio"].append(process / (pipe + local))
    return out


def _spread(runs: List[float], fmt: str = ".0f") -> str:
    return (f"{statistics.median(runs):{fmt}} "
            f"[{min(runs):{fmt}}-{max(runs):{fmt}}]")


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
    results: Dict[str, Any] = {"round_trip_us": {}, "parallel_cartpole_8": {}}
    for start_method in ("fork", "spawn", "forkserver"):
        for flatten in (False, True):
            key = f"{start_method}, flatten={flatten}"
            runs = [step_round_trip(start_method, flatten, args.steps)
                    for _ in range(args.repeats)]
            results["round_trip_us"][key] = [r * 1e6 for r in runs]
    runs = [parallel_throughput(8, args.steps // 3) for _ in range(args.repeats)]
    results["parallel_cartpole_8"] = runs
    results["cartpole_round_trip"] = round_trip_ratio(args.steps, args.repeats)
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
    cartpole = results["cartpole_round_trip"]
    ratio = statistics.median(cartpole["ratio"])
    out.write("\nCartPole-v1, fork, median us [min-max over runs]:\n\n"
              "| ProcessEnvironment.step | bare Pipe round trip | in-process step | "
              f"ratio (target <= {ROUND_TRIP_TARGET:g}) | met |\n|---|---|---|---|---|\n"
              f"| {_spread(cartpole['process_environment_us'])} | "
              f"{_spread(cartpole['pipe_us'])} | {_spread(cartpole['in_process_us'])} | "
              f"{_spread(cartpole['ratio'], '.2f')} | "
              f"{'yes' if ratio <= ROUND_TRIP_TARGET else 'no'} |\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
