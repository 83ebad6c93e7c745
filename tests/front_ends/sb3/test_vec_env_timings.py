"""FastSubprocVecEnv.timings(): the vector env's figures, one batch per step."""

import functools

import numpy as np

from alf_env.sb3 import FastSubprocVecEnv
from tests.front_ends.gym.test_vector_env_timings import make_env
from tests.support.timings import STEPS, check_slow_env


def test_a_slow_env_shows_in_its_step_time_and_the_straggler_spread():
    env = FastSubprocVecEnv([functools.partial(make_env, i) for i in range(4)], "fork",
                            envs_per_worker=1)
    try:
        env.reset()
        for _ in range(STEPS):
            env.step(np.zeros(4, np.int64))
        timings = env.timings()
        check_slow_env(timings)
        assert timings.wait.count == STEPS and timings.spread.p50_us >= 3_000
        assert env.timings().wait.count == 0
    finally:
        env.close()
