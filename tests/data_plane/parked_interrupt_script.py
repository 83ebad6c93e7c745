"""A training loop with a torch policy, interrupted by Ctrl-C while the trainer's
OpenMP pool is parked for a step. Run by ``tests/data_plane/test_openmp.py``::

    python -m tests.data_plane.parked_interrupt_script

It prints ``parked`` when the step it interrupts has parked the pool, and, on
the way out, whether the pool was still parked once ``KeyboardInterrupt``
reached the loop.
"""

import os
import signal
import threading
import time

import gymnasium as gym
import torch

from alf_env.data_plane.openmp import OpenMpPark
from alf_env.vector import FastVectorEnv


class SlowStep(gym.Wrapper):
    def step(self, action):
        time.sleep(0.5)
        return self.env.step(action)


def main() -> None:
    torch.set_num_threads(2)
    env = FastVectorEnv([lambda: SlowStep(gym.make("CartPole-v1"))] * 4)
    policy = torch.nn.Linear(4, 2)
    park = OpenMpPark()
    park.set(True)
    assert park.available

    def begin():
        end = park.begin()
        print("parked", park.parked, flush=True)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        return end

    obs, _ = env.reset(seed=0)
    env._board.step_hook = begin
    try:
        while True:
            with torch.no_grad():
                actions = policy(torch.as_tensor(obs)).argmax(1).numpy()
            obs = env.step(actions)[0]
    except KeyboardInterrupt:
        print("interrupted; still parked:", park.parked, flush=True)
        raise


if __name__ == "__main__":
    main()
