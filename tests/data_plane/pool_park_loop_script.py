"""A training loop run as a child by test_pool_park.py: a torch MLP's forward pass
at two threads, then a FastVectorEnv step; then steps alone. Prints, as JSON, the
trainer's threads after every forward pass and every step, and how many steps of
each phase parked torch's OpenMP pool (the steps alone counted once the pool
has gone to sleep)."""

import json
import os
import time

import gymnasium as gym
import numpy as np
import torch

from alf_env.vector import FastVectorEnv


def pool_policy():
    """A torch MLP large enough that every forward pass runs on the pool's
    threads, and a batch of observations for it."""
    policy = torch.nn.Sequential(torch.nn.Linear(4, 512), torch.nn.Tanh(),
                                 torch.nn.Linear(512, 512), torch.nn.Tanh(),
                                 torch.nn.Linear(512, 2))
    return policy, torch.zeros(64, 4)


if __name__ == "__main__":
    torch.set_num_threads(2)
    env = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2)
    env.reset(seed=0)
    policy, obs = pool_policy()
    pool = env._board._pool
    seen = []
    for _ in range(100):
        with torch.no_grad():
            policy(obs)
        seen.append(sorted(os.listdir("/proc/self/task")))  # the pool's threads are up
        env.step(np.zeros(2, np.int64))
        seen.append(sorted(os.listdir("/proc/self/task")))
    with_policy = pool.parked_steps
    # The pool spins on for milliseconds after the last parked step (longer in
    # wall time on a loaded machine), and a step in that time rightly parks it:
    # count from when its threads' CPU time has stood still for 50 ms.
    still_since, cpu_ns = time.monotonic(), pool._park.pool_cpu_ns()
    deadline = still_since + 10.0
    while time.monotonic() - still_since < 0.05 and time.monotonic() < deadline:
        env.step(np.zeros(2, np.int64))
        now_ns = pool._park.pool_cpu_ns()
        if now_ns != cpu_ns:
            still_since, cpu_ns = time.monotonic(), now_ns
    before = pool.parked_steps
    for _ in range(100):
        env.step(np.zeros(2, np.int64))
    alone = pool.parked_steps - before
    env.close()
    print(json.dumps({"threads": seen, "torch_threads": torch.get_num_threads(),
                      "parked_with_policy": with_policy, "parked_alone": alone}))
