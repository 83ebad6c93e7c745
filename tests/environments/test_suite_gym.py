"""Tests of suite_gym.load."""

import gymnasium
import numpy as np
import pytest
import torch

from alf_env.data_structures import StepType
from alf_env.environments import suite_gym
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.alf_wrappers import AlfEnvironmentBaseWrapper
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


def test_max_episode_steps_zero_means_no_limit_as_in_alf():
    # CartPole-v1 registers a 500-step limit; 0 removes it (ALF's meaning).
    env = suite_gym.load(CARTPOLE, max_episode_steps=0)
    assert not isinstance(env.gym_env, gymnasium.wrappers.TimeLimit)
    env.seed(0)
    obs = env.reset().observation
    for step in range(600):  # a balancing policy keeps the pole up past 500 steps
        ts = env.step(np.int64(obs[2] + 0.5 * obs[3] + 0.01 * obs[0] + 0.1 * obs[1] > 0))
        assert not ts.is_last(), f"episode ended at step {step + 1}"
        obs = ts.observation
    env.close()


@pytest.mark.parametrize("bad", [-1, 2.5, "10"])
def test_invalid_max_episode_steps_rejected(bad):
    with pytest.raises(ValueError, match=r"max_episode_steps: expected None .* got"):
        suite_gym.load(CARTPOLE, max_episode_steps=bad)


class _CountingGymWrapper(gymnasium.Wrapper):
    """Counts the steps that reach it; tags its order of application."""

    def __init__(self, env, tag="a"):
        super().__init__(env)
        self.tag = tag
        self.steps = 0

    def step(self, action):
        self.steps += 1
        return super().step(action)


class _FrameSkip(gymnasium.Wrapper):
    def step(self, action):
        for _ in range(2):
            result = super().step(action)
            if result[2] or result[3]:
                break
        return result


class _RewardTimesTen(AlfEnvironmentBaseWrapper):
    def _step(self, action):
        ts = self._env.step(action)
        return ts._replace(reward=ts.reward * 10)


def test_gym_and_alf_env_wrappers_applied_in_order_as_in_alf():
    env = suite_gym.load(
        CARTPOLE, max_episode_steps=3,
        gym_env_wrappers=(_CountingGymWrapper, lambda e: _CountingGymWrapper(e, "b")),
        alf_env_wrappers=(_RewardTimesTen, ))
    assert isinstance(env, _RewardTimesTen) and isinstance(env.wrapped_env(), AlfGymWrapper)
    outer = env.gym_env  # the step limit sits around the gymnasium wrappers
    assert isinstance(outer, gymnasium.wrappers.TimeLimit)
    assert outer.env.tag == "b" and outer.env.env.tag == "a"
    env.reset()
    before = outer.env.steps  # the wrapper's env_info probe stepped once
    ts = env.step(PUSH_RIGHT)
    assert float(ts.reward) == 10.0 and outer.env.steps == before + 1
    assert env.action_spec() == BoundedTensorSpec((), torch.int64, 0, 1)
    env.step(PUSH_RIGHT)
    assert env.step(PUSH_RIGHT).is_last()  # the registered limit replaced by 3
    env.close()


def test_step_limit_counts_steps_of_the_wrapped_env_as_in_alf():
    # ALF's TimeLimit is outside the gymnasium wrappers: with a frame skip of
    # 2, 3 steps of the ALF env are 6 frames.
    env = suite_gym.load(CARTPOLE, max_episode_steps=3,
                         gym_env_wrappers=(_CountingGymWrapper, _FrameSkip))
    frames = env.gym_env.env.env  # TimeLimit(_FrameSkip(_CountingGymWrapper(...)))
    env.seed(0)
    env.reset()
    before = frames.steps
    types = [int(env.step(np.int64(i % 2)).step_type) for i in range(3)]
    assert types == [StepType.MID, StepType.MID, StepType.LAST]
    assert frames.steps - before == 6
    env.close()


def test_gym_env_wrappers_keep_the_registered_limit():
    env = suite_gym.load(CARTPOLE, gym_env_wrappers=(_CountingGymWrapper, ))
    assert env.gym_env.spec.max_episode_steps == 500
    assert env.gym_env._max_episode_steps == 500
    env.close()


def test_wrap_env_as_in_alf():
    env = suite_gym.wrap_env(gymnasium.make(CARTPOLE, max_episode_steps=None), env_id=4,
                             max_episode_steps=2)
    assert int(env.reset().env_id) == 4
    env.step(PUSH_RIGHT)
    assert env.step(PUSH_RIGHT).is_last()
    env.close()
    with pytest.raises(ValueError, match="max_episode_steps: expected 0"):
        suite_gym.wrap_env(gymnasium.make(CARTPOLE), max_episode_steps=None)


def test_failing_wrapper_closes_the_gym_env():
    made = []

    def broken(env):
        made.append(env)
        raise RuntimeError("broken wrapper")

    with pytest.raises(RuntimeError, match="broken wrapper"):
        suite_gym.load(CARTPOLE, alf_env_wrappers=(lambda e: made.append(e) or broken(e), ))
    assert made and made[0].closed


def test_mujoco_float64_env_gives_float32_specs_by_default(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warnings log to the cwd
    env = suite_gym.load("HalfCheetah-v5")
    assert env.gym_env.observation_space.dtype == np.float64
    assert env.observation_spec().dtype == torch.float32
    assert env.action_spec().dtype == torch.float32
    ts = env.reset()
    assert ts.observation.dtype == np.float32
    ts = env.step(env.action_spec().numpy_zeros())
    assert ts.observation.dtype == np.float32
    env.close()
    kept = suite_gym.load("HalfCheetah-v5", float_dtype=None)
    assert kept.observation_spec().dtype == torch.float64
    assert kept.reset().observation.dtype == np.float64
    kept.close()
