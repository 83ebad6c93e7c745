"""A training loop run as a child by test_pool_park.py, with the trainer's torch
threads short of CPUs: once torch's OpenMP runtime has sized its pool and its
spinning for two CPUs, every thread of the process (and so its workers) is
confined to one, as the kernel does when another session's busy process takes
the other core. A torch MLP's forward pass, then a FastVectorEnv step, for 3 s.
Prints, as JSON, torch's threads and the steps taken; the trainer's warning
goes to stderr."""

import json
import os
import time

if __name__ == "__main__":
    import gymnasium as gym
    import numpy as np
    import torch

    from alf_env.vector import FastVectorEnv
    from tests.data_plane.pool_park_loop_script import pool_policy

    torch.set_num_threads(2)
    torch.ones(1 << 20).sum()  # the pool exists, sized for the CPUs at hand
    cpu = {min(os.sched_getaffinity(0))}
    for tid in os.listdir("/proc/self/task"):  # sched_setaffinity sets one thread's
        os.sched_setaffinity(int(tid), cpu)
    env = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2)
    env.reset(seed=0)
    policy, obs = pool_policy()
    end = time.monotonic() + 3.0
    steps = 0
    while time.monotonic() < end:
        with torch.no_grad():
            policy(obs)
        env.step(np.zeros(2, np.int64))
        steps += 1
    env.close()
    print(json.dumps({"torch_threads": torch.get_num_threads(), "steps": steps}))
