"""Tests of the AlfEnvironment base class."""

import numpy as np
import pytest
import torch

from alf_env.data_structures import StepType, restart, termination, transition
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.errors import EnvironmentClosedError
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

EPISODE_LENGTH = 2


class _CountingEnv(AlfEnvironment):
    """Observation = step count; episodes of EPISODE_LENGTH steps."""

    def __init__(self):
        super().__init__()
        self.resets = 0
        self.steps = []
        self.closes = 0
        self._count = 0

    def observation_spec(self):
        return TensorSpec((), torch.int64)

    def action_spec(self):
        return BoundedTensorSpec((), torch.int64, 0, 1)

    def _reset(self):
        self.resets += 1
        self._count = 0
        return restart(np.int64(self._count), self.action_spec())

    def _step(self, action):
        if self.current_time_step().is_last():
            return self.reset()
        self.steps.append(action)
        self._count += 1
        if self._count >= EPISODE_LENGTH:
            return termination(np.int64(self._count), np.int64(action), 1.0)
        return transition(np.int64(self._count), np.int64(action), 1.0)

    def _close(self):
        self.closes += 1


class _BatchedWithoutSize(_CountingEnv):

    @property
    def batched(self):
        return True


def test_abstract_methods_required():
    with pytest.raises(TypeError, match="abstract"):
        AlfEnvironment()


def test_defaults():
    env = _CountingEnv()
    assert not env.batched and env.batch_size == 1
    assert not env.is_tensor_based
    assert env.reward_spec() == TensorSpec(())
    assert env.env_info_spec() == {}
    spec = env.time_step_spec()
    assert spec.observation == env.observation_spec()
    assert spec.prev_action == env.action_spec()
    assert spec.reward == TensorSpec(())
    assert spec.step_type == TensorSpec((), torch.int32)
    assert spec.env_info == {}
    assert env.current_time_step() is None


def test_batched_without_batch_size_override_raises():
    with pytest.raises(RuntimeError, match="does not override batch_size"):
        _ = _BatchedWithoutSize().batch_size


def test_step_before_reset_resets_and_ignores_action():
    env = _CountingEnv()
    ts = env.step(np.int64(1))
    assert int(ts.step_type) == StepType.FIRST
    assert env.resets == 1 and env.steps == []
    assert env.current_time_step() is ts


def test_episode_cycle_resets_after_last():
    env = _CountingEnv()
    types = [int(env.reset().step_type)]
    for _ in range(4):
        types.append(int(env.step(np.int64(0)).step_type))
    assert types == [StepType.FIRST, StepType.MID, StepType.LAST, StepType.FIRST, StepType.MID]


def test_seed_and_render_not_supported_by_default():
    env = _CountingEnv()
    with pytest.raises(NotImplementedError, match="seed"):
        env.seed(1)
    with pytest.raises(NotImplementedError, match="render"):
        env.render("rgb_array")


def test_close_is_idempotent_and_blocks_use():
    env = _CountingEnv()
    env.reset()
    env.close()
    env.close()
    assert env.closes == 1 and env.closed
    with pytest.raises(EnvironmentClosedError, match="_CountingEnv is closed"):
        env.reset()
    with pytest.raises(EnvironmentClosedError, match="closed"):
        env.step(np.int64(0))


def test_context_manager_closes():
    with _CountingEnv() as env:
        env.reset()
        assert not env.closed
    assert env.closed and env.closes == 1


def test_alf_task_interface_defaults():
    env = _CountingEnv()
    assert env.num_tasks == 1 and env.task_names == ["0"]


def test_alf_sync_progress_placeholder_and_get_info():
    """ALF's trainer calls env.sync_progress() on any env: a no-op by default."""
    env = _CountingEnv()
    env.reset()
    assert env.sync_progress() is None and env.sync_progress(0.5) is None
    assert int(env.step(0).step_type) == StepType.MID  # nothing changed
    with pytest.raises(NotImplementedError, match="does not support get_info"):
        env.get_info()
