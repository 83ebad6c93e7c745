"""Where a training loop's time goes: the policy's forward pass against the env step.

Usage::

    python benchmarks/training_loop_phases.py --env HalfCheetah-v5 --repeats 5
    python benchmarks/training_loop_phases.py --variants fast_vector,fast_vector+t1 --repeats 5

Each variant runs the loop of ``alf-env-bench --policy mlp`` (a torch MLP
forward, 2 x 256 Tanh, on the batch of observations, then the batched step of 8
envs) in a fresh process and times the two phases of every iteration apart.
The variants are interleaved, ``--repeats`` times. A variant is a backend
(``fast_vector``: ``FastVectorEnv`` with its defaults; ``gym_sync``:
``SyncVectorEnv``) with options joined by ``+``: ``t1`` sets
``torch.set_num_threads(1)``, ``spinN`` passes ``spin_us=N``, ``os`` passes
``worker_cpus=None``, ``nopolicy`` leaves the forward pass out.

Prints per variant the median over repeats of: the forward pass (median and
mean µs), the step (median, 90th percentile and mean µs) and env-steps/s.
"""

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

#: Environments per batch.
NUM_ENVS = 8
#: Untimed iterations before the timed ones.
WARMUP = 200


def run_variant(env_id: str, variant: str, steps: int) -> Dict[str, float]:
    """Runs one variant in this process; returns its phase statistics."""
    import torch

    threads = torch.get_num_threads()
    try:
        return _run(env_id, variant, steps)
    finally:
        torch.set_num_threads(threads)  # "t1" must not outlive the variant


def _run(env_id: str, variant: str, steps: int) -> Dict[str, float]:
    import gymnasium as gym
    import numpy as np
    import torch

    from alf_env.bench.loads import MlpPolicy
    from alf_env.bench.workloads import make_env
    from alf_env.vector import FastVectorEnv

    backend, *options = variant.split("+")
    kwargs: Dict[str, object] = {}
    for option in options:
        if option == "t1":
            torch.set_num_threads(1)
        elif option.startswith("spin"):
            kwargs["spin_us"] = int(option[4:])
        elif option == "os":
            kwargs["worker_cpus"] = None
        elif option != "nopolicy":
            raise ValueError(f"unknown option {option!r} in variant {variant!r}")
    fns = [functools.partial(make_env, env_id, i) for i in range(NUM_ENVS)]
    if backend == "gym_sync":
        env = gym.vector.SyncVectorEnv(fns)
    elif backend == "fast_vector":
        env = FastVectorEnv(fns, **kwargs)
    else:
        raise ValueError(f"unknown backend {backend!r}: expected fast_vector or gym_sync")
    policy = None if "nopolicy" in options else MlpPolicy()
    try:
        obs, _ = env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(64)]
        forward: List[float] = []
        step: List[float] = []
        for k in range(WARMUP + steps):
            t0 = time.perf_counter()
            if policy is not None:
                policy(obs)
            t1 = time.perf_counter()
            obs = env.step(actions[k % len(actions)])[0]
            t2 = time.perf_counter()
            if k >= WARMUP:
                forward.append(t1 - t0)
                step.append(t2 - t1)
    finally:
        env.close()
    fw, st = np.array(forward) * 1e6, np.array(step) * 1e6
    return {"forward_median_us": float(np.median(fw)), "forward_mean_us": float(fw.mean()),
            "step_median_us": float(np.median(st)), "step_p90_us": float(np.percentile(st, 90)),
            "step_mean_us": float(st.mean()),
            "env_steps_per_s": NUM_ENVS * 1e6 / float(fw.mean() + st.mean())}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v5",
                        help="an alf-env-bench workload (Pong, S30, ...) or a gymnasium id")
    parser.add_argument("--variants", default="fast_vector,fast_vector+nopolicy,gym_sync,"
                        "fast_vector+t1,gym_sync+t1,fast_vector+t1+spin300",
                        help="comma-separated variants (module doc)")
    parser.add_argument("--steps", type=int, default=3000, help="timed iterations per run")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved runs per variant")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_variant(args.env, args.child, args.steps)))
        return 0
    variants = args.variants.split(",")
    runs: Dict[str, List[Dict[str, float]]] = {v: [] for v in variants}
    for r in range(args.repeats):
        for variant in variants[r % len(variants):] + variants[:r % len(variants)]:
            out = subprocess.run([sys.executable, __file__, "--env", args.env, "--steps",
                                  str(args.steps), "--child", variant],
                                 capture_output=True, text=True, check=True)
            runs[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.env}, {NUM_ENVS} envs, median of {args.repeats} runs of {args.steps} steps")
    print("| variant | forward median µs | forward mean µs | step median µs | step p90 µs "
          "| step mean µs | env-steps/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    keys = ("forward_median_us", "forward_mean_us", "step_median_us", "step_p90_us",
            "step_mean_us")
    for variant in variants:
        med = {k: statistics.median(run[k] for run in runs[variant])
               for k in keys + ("env_steps_per_s",)}
        print(f"| `{variant}` | " + " | ".join(f"{med[k]:.0f}" for k in keys)
              + f" | {med['env_steps_per_s'] / 1000:.1f}k |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
