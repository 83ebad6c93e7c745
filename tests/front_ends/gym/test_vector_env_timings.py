"""FastVectorEnv.timings(): a slow env shows as that env's step time and as the
straggler spread; the counts start again after each call."""

import functools
import time

import gymnasium as gym

from alf_env.vector import FastVectorEnv
from tests.support.timings import SLOW_ENV, SLOW_S, STEPS, check_slow_env


class SlowStep(gym.Wrapper):
    """Sleeps ``SLOW_S`` in each step."""

    def step(self, action):
        time.sleep(SLOW_S)
        return self.env.step(action)


def make_env(index: int) -> gym.Env:
    env = gym.make("CartPole-v1")
    return SlowStep(env) if index == SLOW_ENV else env


def env_fns(n=4):
    return [functools.partial(make_env, i) for i in range(n)]


def run_steps(env, steps=STEPS):
    env.reset(seed=0)
    for _ in range(steps):
        env.step(env.action_space.sample())


def test_a_slow_env_shows_in_its_step_time_and_the_straggler_spread():
    env = FastVectorEnv(env_fns(), num_workers=4)
    try:
        run_steps(env)
        timings = env.timings()
        check_slow_env(timings)
        assert timings.wait.count == timings.spread.count == timings.handoff.count == STEPS
        assert timings.spread.p50_us >= 3_000
        assert timings.wait.p50_us >= timings.spread.p50_us * 0.8
        assert 0 <= timings.handoff.mean_us < timings.wait.mean_us
        assert "env 2 step (slowest)" in str(timings)
        # Counted again from zero.
        again = env.timings()
        assert [s.count for s in again.envs] == [0] * 4 and again.wait.count == 0
        env.step(env.action_space.sample())
        assert [s.count for s in env.timings().envs] == [1] * 4
    finally:
        env.close()


def test_step_async_and_wait_count_as_lockstep_batches():
    env = FastVectorEnv(env_fns(2), num_workers=2)
    try:
        env.reset(seed=0)
        for _ in range(5):
            env.step_async(env.action_space.sample())
            env.step_wait()
        timings = env.timings()
        assert timings.wait.count == 5 and [s.count for s in timings.envs] == [5, 5]
    finally:
        env.close()


def test_the_pipe_path_times_each_env_but_no_batch():
    env = FastVectorEnv(env_fns(), shared_memory=False, num_workers=2)
    try:
        run_steps(env)
        timings = env.timings()
        check_slow_env(timings)
        assert timings.wait.count == 0 and "pipe path" in timings.note
    finally:
        env.close()


def test_several_envs_per_worker_are_timed_one_by_one():
    env = FastVectorEnv(env_fns(), num_workers=2)
    try:
        run_steps(env)
        check_slow_env(env.timings())
    finally:
        env.close()
