"""Tests of suite_gym.load."""

import numpy as np
import pytest
import torch

from alf_env.data_structures import StepType
from alf_env.environments import suite_gym
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.tensor_specs import BoundedTensorSpec

CARTPOLE = "CartPole-v1"
PUSH_RIGHT = np.int64(1)


def _run_until_last(env, max_steps):
    env.reset()
    for step in range(1, max_steps + 1):
        ts = env.step(PUSH_RIGHT)
        if ts.is_last():
            return step, ts
    raise AssertionError(f"no LAST step within {max_steps} steps")


def test_load_returns_wrapper_with_specs():
    env = suite_gym.load(CARTPOLE, env_id=3)
    assert isinstance(env, AlfGymWrapper)
    assert env.action_spec() == BoundedTensorSpec((), torch.int64, 0, 1)
    assert env.observation_spec().shape == (4, )
    assert int(env.reset().env_id) == 3
    env.close()


@pytest.mark.parametrize("limit", [1, 3, 5])
def test_max_episode_steps_truncates_with_discount_one(limit):
    env = suite_gym.load(CARTPOLE, max_episode_steps=limit)
    env.seed(0)
    env.reset()
    # Alternate pushes so the pole does not fall before the limit.
    for step in range(1, limit + 1):
        ts = env.step(np.int64(step % 2))
    assert int(ts.step_type) == StepType.LAST
    assert float(ts.discount) == 1.0
    assert int(env.step(np.int64(0)).step_type) == StepType.FIRST
    env.close()


def test_termination_has_discount_zero():
    env = suite_gym.load(CARTPOLE)
    env.seed(0)
    # Always pushing right tips the pole over well before the 500-step limit.
    steps, ts = _run_until_last(env, max_steps=100)
    assert steps < 100
    assert float(ts.discount) == 0.0
    env.close()


def test_discount_argument_used_for_mid_steps():
    env = suite_gym.load(CARTPOLE, discount=0.9)
    env.reset()
    assert float(env.step(PUSH_RIGHT).discount) == pytest.approx(0.9)
    env.close()


def test_seeded_runs_reproducible():
    observations = []
    for _ in range(2):
        env = suite_gym.load(CARTPOLE)
        env.seed(123)
        run = [env.reset().observation] + [env.step(PUSH_RIGHT).observation for _ in range(5)]
        observations.append(np.stack(run))
        env.close()
    np.testing.assert_array_equal(observations[0], observations[1])


def test_make_kwargs_forwarded():
    # CartPole's sutton_barto_reward gives 0 reward on non-terminal steps
    # instead of gymnasium's default 1.
    env = suite_gym.load(CARTPOLE, sutton_barto_reward=True, render_mode="rgb_array")
    assert env.gym_env.render_mode == "rgb_array"
    env.reset()
    assert float(env.step(PUSH_RIGHT).reward) == 0.0
    env.close()
    default = suite_gym.load(CARTPOLE)
    default.reset()
    assert float(default.step(PUSH_RIGHT).reward) == 1.0
    default.close()
