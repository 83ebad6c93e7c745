"""timings() of FastParallelEnvironment and ParallelAlfEnvironment: a slow env
shows as that env's step time (and, with job slots, as the straggler spread)."""

import functools
import time

import pytest

from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from tests.support.alf_envs import CountingEnv
from tests.support.timings import SLOW_ENV, SLOW_S, STEPS, check_slow_env


class SlowCountingEnv(CountingEnv):
    """A CountingEnv whose steps sleep ``SLOW_S``."""

    def _step(self, action):
        time.sleep(SLOW_S)
        return super()._step(action)


def make_env(env_id: int) -> CountingEnv:
    cls = SlowCountingEnv if env_id == SLOW_ENV else CountingEnv
    return cls(env_id=env_id, min_length=1000, max_length=1001)


def run_steps(env, steps=STEPS):
    env.reset()
    spec = env.action_spec()
    for _ in range(steps):
        env.step(spec.sample((env.batch_size,)))


@pytest.mark.parametrize("num_workers", [4, 2])
def test_fast_parallel_environment(num_workers):
    ctors = [functools.partial(make_env, i) for i in range(4)]
    with FastParallelEnvironment(ctors, num_workers=num_workers) as env:
        run_steps(env)
        timings = env.timings()
        check_slow_env(timings)
        assert timings.wait.count == STEPS
        if num_workers == 4:
            # Env 2 alone in its worker: the others finish ~5 ms earlier.
            assert timings.spread.p50_us >= 3_000
        assert 0 <= timings.handoff.mean_us < timings.wait.mean_us
        again = env.timings()
        assert [s.count for s in again.envs] == [0] * 4 and again.wait.count == 0


@pytest.mark.parametrize("flatten", [True, False])  # flat lists, or nests
def test_parallel_alf_environment_times_envs_and_the_wait_only(flatten):
    ctors = [functools.partial(make_env, i) for i in range(4)]
    with ParallelAlfEnvironment(ctors, flatten=flatten) as env:
        run_steps(env)
        timings = env.timings()
        check_slow_env(timings)
        assert timings.wait.count == STEPS and timings.wait.p50_us >= 4_500
        assert timings.spread.count == timings.handoff.count == 0
        assert "not measured" in timings.note
        assert env.timings().wait.count == 0
