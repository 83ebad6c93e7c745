"""``python -m alf_env``: steps CartPole-v1 in worker processes and prints throughput.

The README's "main job": no downloads, a few seconds, and a number to compare.
"""

import argparse
import sys
import time
from typing import List, Optional

import torch

from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.environments.utils import create_environment

BACKENDS = {"parallel": ParallelAlfEnvironment}


def _register_fast_backend() -> None:
    try:
        from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
    except ImportError:
        return
    BACKENDS["fast"] = FastParallelEnvironment


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the demo; returns the process exit status."""
    _register_fast_backend()
    parser = argparse.ArgumentParser(prog="python -m alf_env", description=__doc__)
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    parser.add_argument("--num-envs", type=int, default=8, help="worker processes")
    parser.add_argument("--steps", type=int, default=2000, help="batched steps to time")
    parser.add_argument("--backend", choices=sorted(BACKENDS), default=None,
                        help="batched env class (default: the fastest available)")
    parser.add_argument("--start-method", default="fork",
                        choices=("fork", "spawn", "forkserver"))
    args = parser.parse_args(argv)
    backend = args.backend or ("fast" if "fast" in BACKENDS else "parallel")
    ctor = BACKENDS[backend]
    env = create_environment(args.env, num_parallel_environments=args.num_envs,
                             parallel_environment_ctor=ctor, seed=0,
                             start_method=args.start_method)
    with env:
        env.reset()
        torch.manual_seed(0)
        actions = [env.action_spec().sample((env.batch_size,)) for _ in range(16)]
        episodes = 0
        begin = time.perf_counter()
        for i in range(args.steps):
            time_step = env.step(actions[i % len(actions)])
            episodes += int(time_step.is_last().sum())
        elapsed = time.perf_counter() - begin
    env_steps = args.steps * env.batch_size
    sys.stdout.write(
        f"{args.env}: {env.batch_size} envs in worker processes "
        f"({ctor.__name__}, {args.start_method})\n"
        f"{env_steps} env-steps in {elapsed:.2f} s = {env_steps / elapsed:,.0f} env-steps/s "
        f"({episodes} episodes ended)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
