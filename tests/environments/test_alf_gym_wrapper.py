"""Tests of AlfGymWrapper."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from alf_env import nest
from alf_env.data_structures import StepType
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper, tensor_spec_from_gym_space
from alf_env.errors import EnvironmentClosedError
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec


class _ScriptedEnv(gym.Env):
    """A gymnasium env whose episode end and info are scripted.

    Episodes last ``length`` steps and end with ``terminated`` or ``truncated``
    as ``end`` says. Observations are samples of the observation space; info
    holds the step count, a vector, a nested dict and non-numeric entries.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, observation_space=None, action_space=None, length=3,
                 end="terminated", render_mode=None):
        self.observation_space = observation_space or spaces.Box(-1.0, 1.0, (2, ), np.float32)
        self.action_space = action_space or spaces.Discrete(3)
        self._length = length
        self._end = end
        self._count = 0
        self.render_mode = render_mode
        self.actions = []
        self.reset_seeds = []
        self.closed = False

    def _info(self):
        return {
            "count": self._count,
            "vec": np.full(2, self._count, dtype=np.float32),
            "nested": {"flag": self._count % 2 == 0, "name": "x"},
            "text": "ignored",
            "none": None,
            "ragged": [[1], [1, 2]],
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.reset_seeds.append(seed)
        self._count = 0
        self.observation_space.seed(int(self.np_random.integers(1 << 30)))
        return self.observation_space.sample(), self._info()

    def step(self, action):
        assert self.action_space.contains(action), action
        self.actions.append(action)
        self._count += 1
        done = self._count >= self._length
        terminated = done and self._end in ("terminated", "both")
        truncated = done and self._end in ("truncated", "both")
        reward = float(self._count)
        return self.observation_space.sample(), reward, terminated, truncated, self._info()

    def render(self):
        return np.zeros((2, 2, 3), dtype=np.uint8)

    def close(self):
        self.closed = True


def _wrap(**kwargs):
    env_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in (
        "observation_space", "action_space", "length", "end", "render_mode")}
    return AlfGymWrapper(_ScriptedEnv(**env_kwargs), **kwargs)


@pytest.mark.parametrize("space,expected", [
    (spaces.Box(-2.0, 3.0, (2, 3), np.float32),
     BoundedTensorSpec((2, 3), torch.float32, -2.0, 3.0)),
    (spaces.Box(0, 255, (4, ), np.uint8), BoundedTensorSpec((4, ), torch.uint8, 0, 255)),
    (spaces.Box(np.array([-np.inf, 0.0]), np.array([np.inf, 1.0]), dtype=np.float64),
     BoundedTensorSpec((2, ), torch.float64, [-np.inf, 0.0], [np.inf, 1.0])),
    (spaces.Discrete(5), BoundedTensorSpec((), torch.int64, 0, 4)),
    (spaces.Discrete(3, start=-1), BoundedTensorSpec((), torch.int64, -1, 1)),
    (spaces.MultiDiscrete([2, 5]), BoundedTensorSpec((2, ), torch.int64, 0, [1, 4])),
    (spaces.MultiDiscrete([3, 4], start=[1, -2]),
     BoundedTensorSpec((2, ), torch.int64, [1, -2], [3, 1])),
    (spaces.MultiBinary(3), BoundedTensorSpec((3, ), torch.int8, 0, 1)),
    (spaces.MultiBinary([2, 2]), BoundedTensorSpec((2, 2), torch.int8, 0, 1)),
])
def test_space_to_spec(space, expected):
    assert tensor_spec_from_gym_space(space) == expected


def test_dict_and_tuple_spaces_nest_with_sorted_keys():
    space = spaces.Dict({
        "z": spaces.Discrete(2),
        "a": spaces.Tuple((spaces.MultiBinary(2), spaces.Box(0, 1, (1, )))),
    })
    spec = tensor_spec_from_gym_space(space)
    assert list(spec) == ["a", "z"]
    assert isinstance(spec["a"], tuple) and len(spec["a"]) == 2
    assert spec["a"][0] == BoundedTensorSpec((2, ), torch.int8, 0, 1)
    assert spec["z"] == BoundedTensorSpec((), torch.int64, 0, 1)


def test_unsupported_space_names_path():
    space = spaces.Dict({"ok": spaces.Discrete(2), "bad": spaces.Text(5)})
    with pytest.raises(TypeError, match=r"space at bad: expected Box, .* got Text"):
        tensor_spec_from_gym_space(space)


ALL_SPACES = spaces.Dict({
    "box": spaces.Box(-1.0, 1.0, (2, ), np.float32),
    "disc": spaces.Discrete(4, start=1),
    "multi": spaces.MultiDiscrete([2, 3]),
    "bin": spaces.MultiBinary(2),
    "tup": spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 255, (2, ), np.uint8))),
})


def test_every_space_kind_round_trips_observations_and_actions():
    env = _wrap(observation_space=ALL_SPACES, action_space=ALL_SPACES, length=100)
    spec = env.observation_spec()
    assert env.action_spec() == spec
    ts = env.reset()
    for _ in range(3):
        nest.assert_same_structure(env.time_step_spec(), ts)
        for obs_spec, value in zip(nest.flatten(spec), nest.flatten(ts.observation)):
            assert isinstance(value, np.ndarray)
            assert value.dtype == obs_spec.numpy_dtype
            assert value.shape == tuple(obs_spec.shape)
            assert np.all(value >= obs_spec.minimum) and np.all(value <= obs_spec.maximum)
        action = nest.map_structure(
            lambda s: s.numpy_sample(rng=np.random.RandomState(0)), spec)
        ts = env.step(action)
        gym_action = env.gym_env.actions[-1]
        assert isinstance(gym_action, dict) and isinstance(gym_action["tup"], tuple)
        assert isinstance(gym_action["disc"], int)
        np.testing.assert_array_equal(ts.prev_action["multi"], action["multi"])


def test_list_action_accepted_for_tuple_space():
    env = _wrap(action_space=spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))))
    env.reset()
    ts = env.step([1, 2])
    assert env.gym_env.actions[-1] == (1, 2)
    assert isinstance(ts.prev_action, tuple)
    assert [int(a) for a in ts.prev_action] == [1, 2]


def test_torch_actions_accepted():
    env = _wrap(action_space=spaces.Box(-1.0, 1.0, (2, ), np.float32))
    env.reset()
    ts = env.step(torch.tensor([0.5, -0.5]))
    np.testing.assert_allclose(ts.prev_action, [0.5, -0.5])
    assert isinstance(ts.prev_action, np.ndarray)


@pytest.mark.parametrize("end,discount,expected_last_discount", [
    ("terminated", 1.0, 0.0),
    ("truncated", 1.0, 1.0),
    ("both", 1.0, 0.0),
    ("truncated", 0.9, 0.9),
])
def test_terminated_vs_truncated_discount(end, discount, expected_last_discount):
    env = _wrap(length=2, end=end, discount=discount)
    steps = [env.reset()]
    probe_actions = len(env.gym_env.actions)
    steps += [env.step(0) for _ in range(3)]
    assert [int(ts.step_type) for ts in steps] == [0, 1, 2, 0]
    np.testing.assert_allclose([float(ts.discount) for ts in steps],
                               [1.0, discount, expected_last_discount, 1.0])
    assert [float(ts.reward) for ts in steps] == [0.0, 1.0, 2.0, 0.0]
    # The step after LAST reset the gym env and did not forward the action.
    assert len(env.gym_env.actions) - probe_actions == 2


def test_step_before_reset_resets():
    env = _wrap()
    ts = env.step(1)
    assert int(ts.step_type) == StepType.FIRST
    assert env.gym_env.actions == [0]  # only the construction-time probe


def test_time_step_dtypes_and_env_id():
    env = _wrap(env_id=4)
    for ts in (env.reset(), env.step(np.int64(2))):
        assert ts.step_type.dtype == np.int32 and ts.env_id.dtype == np.int32
        assert int(ts.env_id) == 4
        assert ts.reward.dtype == np.float32 and ts.discount.dtype == np.float32
        assert ts.prev_action.dtype == np.int64


def test_env_info_keeps_fixed_size_numeric_entries():
    env = _wrap(length=5)
    assert env.env_info_spec() == {
        "count": TensorSpec((), torch.int64),
        "vec": TensorSpec((2, ), torch.float32),
        "nested": {"flag": TensorSpec((), torch.bool)},
    }
    assert env.time_step_spec().env_info == env.env_info_spec()
    first = env.reset()
    assert int(first.env_info["count"]) == 0
    ts = env.step(0)
    assert int(ts.env_info["count"]) == 1
    np.testing.assert_array_equal(ts.env_info["vec"], [1.0, 1.0])
    assert ts.env_info["nested"]["flag"].dtype == np.bool_
    nest.assert_same_structure(env.time_step_spec(), ts)


def test_env_info_missing_entry_is_zero_and_shape_change_rejected():
    env = _wrap(env_info_spec={"count": TensorSpec(()), "gone": TensorSpec((3, ))})
    ts = env.reset()
    np.testing.assert_array_equal(ts.env_info["gone"], np.zeros(3, np.float32))
    bad = _wrap(env_info_spec={"vec": TensorSpec((3, ))})
    with pytest.raises(ValueError, match=r"env_info.vec: expected shape \(3,\) .* got "
                       r"shape \(2,\)"):
        bad.reset()


def test_explicit_env_info_spec_skips_probe():
    env = _wrap(env_info_spec={})
    assert env.gym_env.reset_seeds == [] and env.gym_env.actions == []
    assert env.reset().env_info == {}


def test_seed_passed_to_next_reset_and_reproducible():
    a = _wrap(observation_space=spaces.Box(-1.0, 1.0, (3, ), np.float32))
    b = _wrap(observation_space=spaces.Box(-1.0, 1.0, (3, ), np.float32))
    a.seed(11)
    b.seed(11)
    first_a, first_b = a.reset(), b.reset()
    assert a.gym_env.reset_seeds[-1] == 11
    np.testing.assert_array_equal(first_a.observation, first_b.observation)
    np.testing.assert_array_equal(a.step(1).observation, b.step(1).observation)
    a.reset()
    assert a.gym_env.reset_seeds[-1] is None  # the seed is used once


def test_action_validation_names_field():
    env = _wrap(action_space=spaces.Dict({"move": spaces.Box(-1, 1, (2, ), np.float32)}))
    env.reset()
    with pytest.raises(ValueError, match=r"action.move: expected shape \(2,\)"):
        env.step({"move": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="does not match the action spec"):
        env.step(np.zeros(2, np.float32))


def test_render_uses_gym_render_mode():
    env = _wrap(render_mode="rgb_array")
    assert env.render("rgb_array").shape == (2, 2, 3)
    with pytest.raises(ValueError, match="made with render_mode=None"):
        _wrap().render("rgb_array")


def test_close_closes_gym_env_and_blocks_use():
    env = _wrap()
    env.close()
    assert env.gym_env.closed
    with pytest.raises(EnvironmentClosedError):
        env.reset()


def test_attribute_forwarding():
    env = _wrap()
    assert env.metadata == {"render_modes": ["rgb_array"]}
    with pytest.raises(AttributeError):
        _ = env.no_such_attribute
