"""Tests of AlfGymWrapper."""

import collections
import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from alf_env import nest
from alf_env.data_structures import StepType
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper, tensor_spec_from_gym_space
from alf_env.environments.gym_conversions import fetch_info
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
     BoundedTensorSpec((2, ), torch.float32, [-np.inf, 0.0], [np.inf, 1.0])),
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


def test_float_box_becomes_float32_as_in_alf_unless_float_dtype_none():
    space = spaces.Box(-1.0, np.array([1.0, 2.0]), dtype=np.float64)
    spec = tensor_spec_from_gym_space(space)
    assert spec == BoundedTensorSpec((2, ), torch.float32, -1.0, [1.0, 2.0])
    assert spec.minimum.dtype == np.float32
    kept = tensor_spec_from_gym_space(space, float_dtype=None)
    assert kept == BoundedTensorSpec((2, ), torch.float64, -1.0, [1.0, 2.0])
    assert tensor_spec_from_gym_space(space, True, np.float16).dtype == torch.float16
    # Only floating Boxes: integer Boxes keep their dtype.
    assert tensor_spec_from_gym_space(spaces.Box(0, 255, (2, ), np.uint8)).dtype == torch.uint8
    # float64 extremes do not fit float32: they become infinite, as a cast does.
    huge = spaces.Box(-np.finfo(np.float64).max, np.finfo(np.float64).max, (1, ), np.float64)
    assert np.isinf(tensor_spec_from_gym_space(huge).maximum)


def test_simplify_box_bounds_as_in_alf():
    space = spaces.Box(np.zeros(3, np.float32), np.ones(3, np.float32), dtype=np.float32)
    simple = tensor_spec_from_gym_space(space)
    assert simple.minimum.shape == () and simple.maximum.shape == ()
    full = tensor_spec_from_gym_space(space, simplify_box_bounds=False)
    assert full.minimum.shape == (3, ) and full.maximum.shape == (3, )
    assert simple == full
    mixed = tensor_spec_from_gym_space(
        spaces.Box(0.0, np.array([1.0, 2.0], np.float32), dtype=np.float32))
    assert mixed.minimum.shape == () and mixed.maximum.shape == (2, )
    multi = tensor_spec_from_gym_space(spaces.MultiDiscrete([3, 3]))
    assert multi.maximum.shape == () and int(multi.maximum) == 2


def test_dict_space_keeps_its_key_order_as_in_alf():
    ordered = collections.OrderedDict([("z", spaces.Discrete(2)), ("a", spaces.Discrete(3))])
    spec = tensor_spec_from_gym_space(spaces.Dict(ordered))
    assert list(spec) == ["z", "a"]
    # nest still visits dict keys sorted (the public contract).
    assert nest.flatten(spec) == [spec["a"], spec["z"]]
    env = _wrap(observation_space=spaces.Dict(ordered), length=5)
    assert list(env.observation_spec()) == ["z", "a"]
    assert list(env.reset().observation) == ["z", "a"]
    assert list(env.step(0).observation) == ["z", "a"]


def test_dict_and_tuple_spaces_nest():
    space = spaces.Dict({
        "z": spaces.Discrete(2),
        "a": spaces.Tuple((spaces.MultiBinary(2), spaces.Box(0, 1, (1, )))),
    })
    spec = tensor_spec_from_gym_space(space)
    assert list(spec) == ["a", "z"]  # gymnasium sorts the keys of a plain dict
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


def test_float64_env_gives_float32_time_steps_unless_float_dtype_none():
    space = spaces.Box(-1.0, 1.0, (2, ), np.float64)
    env = _wrap(observation_space=space, action_space=space, length=4)
    assert env.observation_spec().dtype == torch.float32
    assert env.action_spec().dtype == torch.float32
    ts = env.reset()
    assert ts.observation.dtype == np.float32
    ts = env.step(np.array([0.5, -0.25], np.float32))
    assert ts.observation.dtype == np.float32 and ts.prev_action.dtype == np.float32
    # The gymnasium env still gets actions of its own dtype.
    assert env.gym_env.actions[-1].dtype == np.float64
    np.testing.assert_array_equal(env.gym_env.actions[-1], [0.5, -0.25])
    kept = _wrap(observation_space=space, action_space=space, length=4, float_dtype=None)
    assert kept.observation_spec().dtype == torch.float64
    assert kept.reset().observation.dtype == np.float64


def test_get_info_returns_the_last_gym_info_as_in_alf():
    env = _wrap(length=2)
    assert env.get_info() is None
    first = env.reset()
    # ALF's reset clears the info (its gym reset had none): None until a step.
    # The reset's numeric info still reaches the FIRST time step.
    assert env.get_info() is None and int(first.env_info["count"]) == 0
    env.step(1)
    info = env.get_info()
    assert info["count"] == 1 and info["ragged"] == [[1], [1, 2]]  # unfiltered
    env.step(1)  # LAST
    assert env.get_info()["count"] == 2
    env.step(1)  # the reset after LAST
    assert env.get_info() is None
    env.step(1)
    assert env.get_info()["count"] == 1


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
        assert type(gym_action["disc"]) is np.int64  # the space's dtype, as a scalar
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


# ----- compiled fast paths against the general conversions -------------------------

class _GeneralWrapper(AlfGymWrapper):
    """Takes the general (uncompiled) conversions and the time step helpers."""

    def _compile(self):
        super()._compile()
        self._fast_gym_action = None  # _to_gym_action takes its general branches

    def _observation(self, observation):
        return self._observation_general(observation)

    def _action_arrays(self, action):
        return self._action_arrays_general(action)

    def _env_info(self, info):
        return fetch_info(self._env_info_spec, info, "")

    def _to_gym_action(self, space, action):
        return super()._to_gym_action(space, action)

    @staticmethod
    def _reward(reward):
        return AlfGymWrapper._reward(reward)


class _FormsEnv(_ScriptedEnv):
    """A _ScriptedEnv whose observations, rewards and infos come in other forms."""

    def __init__(self, observation_transform, reward=1.0, info_transform=None, **kwargs):
        super().__init__(**kwargs)
        self._transform = observation_transform
        self._reward_value = reward
        self._info_transform = info_transform or (lambda info: info)

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed, options=options)
        return self._transform(observation), self._info_transform(info)

    def step(self, action):
        observation, _, terminated, truncated, info = super().step(action)
        return (self._transform(observation), self._reward_value, terminated, truncated,
                self._info_transform(info))


def _describe(value):
    """Everything observable about a nest of arrays: types, dtypes, layout, bytes."""
    if isinstance(value, dict):
        return (type(value), [(k, _describe(v)) for k, v in value.items()])
    if isinstance(value, (tuple, list)):
        return (type(value), [_describe(v) for v in value])
    if isinstance(value, np.ndarray):
        return (np.ndarray, value.dtype.str, value.shape, value.strides,
                value.flags.writeable, value.flags.owndata, value.tobytes())
    if torch.is_tensor(value):
        return (torch.Tensor, value.dtype, tuple(value.shape), value.tolist())
    return (type(value), repr(value))


def _outcome(call):
    try:
        return ("ok", _describe(call()))
    except Exception as err:  # noqa: BLE001 -- the same error, type and message, is expected
        return ("error", type(err), str(err))


def _to_list(value):
    return value.tolist() if isinstance(value, np.ndarray) else value


def _as_ordered_dict(value):
    return collections.OrderedDict(value) if isinstance(value, dict) else value


def _as_torch(value):
    return nest.map_structure(lambda x: torch.as_tensor(np.asarray(x)), value)


def _as_float64(value):
    return nest.map_structure(lambda x: np.asarray(x, np.float64), value)


def _as_fortran(value):
    return nest.map_structure(lambda x: np.asfortranarray(np.asarray(x)), value)


TUPLE_SPACE = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2, 2), np.float32)))
NESTED_SPACE = spaces.Dict({"z": TUPLE_SPACE, "a": spaces.Box(0, 5, (3, ), np.int32)})
#: The spaces whose conversions are compared between the wrapper's paths.
CONVERTED_SPACES = [
    spaces.Box(-1.0, 1.0, (4, ), np.float32),
    spaces.Box(-1.0, 1.0, (2, ), np.float64),
    spaces.Discrete(5, start=-2),
    spaces.MultiBinary(3),
    ALL_SPACES,
    TUPLE_SPACE,
    NESTED_SPACE,
]


@pytest.mark.parametrize("space", CONVERTED_SPACES)
@pytest.mark.parametrize("transform", [
    lambda x: x, _as_float64, _as_torch, _as_fortran, _as_ordered_dict,
    lambda x: list(x) if isinstance(x, tuple) else x,
    lambda x: nest.map_structure(_to_list, x),
    lambda x: (x, ),  # a structure mismatch
])
def test_fast_paths_match_general_path(space, transform):
    def run(wrapper_class, reward):
        env = wrapper_class(_FormsEnv(transform, reward=reward, observation_space=space,
                                      action_space=space, length=4, end="both"), env_id=2,
                            discount=0.9)
        env.seed(0)
        rng = np.random.RandomState(0)
        outcomes = [_outcome(env.reset)]
        for i in range(10):
            sample = nest.map_structure(lambda s: s.numpy_sample(rng=rng), env.action_spec())
            action = [sample, transform(sample), _as_torch(sample),
                      nest.map_structure(lambda x: x[()] if x.ndim == 0 else x, sample),
                      nest.map_structure(_to_list, sample)][i % 5]
            outcomes.append(_outcome(lambda action=action: env.step(action)))
        return outcomes, [repr(a) for a in env.gym_env.actions]

    for reward in (1.0, np.float64(2.5), 3, torch.tensor(0.5), np.zeros(1)):
        assert run(AlfGymWrapper, reward) == run(_GeneralWrapper, reward)



@pytest.mark.parametrize("value", [0, 5, -128, 127, 128, -129, np.int64(7), np.array(3),
                                   np.int8(5), np.array(4, np.int8), np.uint8(200), 2.0])
def test_compiled_discrete_action_converts_as_the_general_path(value):
    from alf_env.environments.gym_conversions import compile_gym_action

    space = spaces.Discrete(100, start=-50, dtype=np.int8)

    def outcome(convert):
        try:
            converted = convert(value)
            return type(converted), converted
        except Exception as err:  # noqa: BLE001 -- the same error is expected of both
            return type(err)

    general = _GeneralWrapper(_ScriptedEnv())
    assert outcome(compile_gym_action(space)) == outcome(
        lambda v: general._to_gym_action(space, v))


@pytest.mark.parametrize("info_transform", [
    lambda info: info,
    lambda info: collections.OrderedDict(info),
    lambda info: None,
    lambda info: {**info, "nested": 3},
    lambda info: {k: v for k, v in info.items() if k != "vec"},
    lambda info: {**info, "vec": np.zeros(3)},  # a shape change
    lambda info: {**info, "count": torch.tensor(7)},
    # Scalars the compiled leaf converts with one np.array(x, dtype):
    lambda info: {**info, "count": np.int64(5), "x": 1.1},           # float -> float32
    lambda info: {**info, "x": np.float64(1.1), "y": 0.1},           # float64 -> float32
    lambda info: {**info, "x": np.float32(2.5), "y": np.float64(-3.3)},
    lambda info: {**info, "nested": {"flag": True}},
    lambda info: {**info, "nested": {"flag": np.bool_(True)}},
    # ...and the ones it leaves to the general code:
    lambda info: {**info, "count": 2.7, "x": 3, "y": True},          # float to int, int, bool
    lambda info: {**info, "count": 2 ** 40, "nested": {"flag": 1.0}},
    lambda info: {**info, "vec": np.float32(1.0)},                   # a scalar for shape (2,)
])
def test_env_info_fast_path_matches_general_path(info_transform):
    def run(wrapper_class):
        env = wrapper_class(_FormsEnv(lambda x: x, info_transform=info_transform, length=3),
                            env_info_spec={"count": TensorSpec((), torch.int64),
                                           "vec": TensorSpec((2, )),
                                           "x": TensorSpec(()),
                                           "y": TensorSpec((), torch.float64),
                                           "nested": {"flag": TensorSpec((), torch.bool)}})
        env.seed(0)
        return [_outcome(env.reset)] + [_outcome(lambda: env.step(1)) for _ in range(4)]

    assert run(AlfGymWrapper) == run(_GeneralWrapper)


def test_observation_of_spec_dtype_is_not_copied_and_others_are_converted():
    returned = []

    def keep(observation):
        returned.append(observation)
        return observation

    env = AlfGymWrapper(_FormsEnv(keep, observation_space=spaces.Box(-1, 1, (2, ), np.float32)))
    ts = env.step(1)
    assert ts.observation is returned[-1]  # np.asarray returned it as is before too
    env = AlfGymWrapper(_FormsEnv(_as_float64,
                                  observation_space=spaces.Box(-1, 1, (2, ), np.float32)))
    ts = env.step(1)
    assert ts.observation.dtype == np.float32


def test_time_step_scalars_are_new_arrays_every_step():
    env = _wrap(length=100)
    first, second = env.reset(), env.step(0)
    third = env.step(1)
    for a, b in ((first, second), (second, third)):
        for field in ("step_type", "reward", "discount", "env_id"):
            x, y = getattr(a, field), getattr(b, field)
            assert type(x) is np.ndarray and x.shape == () and x.flags.writeable
            assert x is not y
    second.step_type[...] = 7
    second.discount[...] = 0.5
    assert int(env.step(1).step_type) == StepType.MID
    assert float(env.step(1).discount) == 1.0


def test_time_steps_of_an_episode_end():
    env = _wrap(length=2, end="terminated", discount=0.9)
    kinds = [(int(ts.step_type), float(ts.discount), ts.prev_action.dtype)
             for ts in [env.reset()] + [env.step(1) for _ in range(3)]]
    assert kinds == [(0, 1.0, np.int64), (1, np.float32(0.9), np.int64),
                     (2, 0.0, np.int64), (0, 1.0, np.int64)]


def test_subclass_converting_observations_to_tensors_keeps_the_helpers():

    class TensorObservations(AlfGymWrapper):
        def _observation(self, observation):
            return torch.as_tensor(super()._observation(observation))

    env = TensorObservations(_ScriptedEnv())
    for ts in (env.reset(), env.step(1)):
        # restart() / transition() make torch time steps of torch observations.
        assert torch.is_tensor(ts.observation) and torch.is_tensor(ts.step_type)
        assert torch.is_tensor(ts.reward) and torch.is_tensor(ts.discount)


def test_an_action_space_replaced_by_a_reset_takes_the_general_conversion():
    env = _wrap(action_space=spaces.Discrete(3), length=2)
    env.step(np.int64(0))  # the first reset
    env.step(np.int64(2))
    assert type(env.gym_env.actions[-1]) is np.int64
    assert env.step(np.int64(1)).is_last()
    # What an env whose action space depends on its episode does in reset().
    env.gym_env.action_space = spaces.Discrete(3, dtype=np.int32)
    env.step(np.int64(0))  # the reset after LAST reads the new space
    env.step(np.int64(2))
    assert env.gym_env.actions[-1] == 2 and type(env.gym_env.actions[-1]) is np.int32


def test_replaced_discount_and_env_id_are_used():
    env = _wrap(length=100, env_id=1, discount=0.9)
    env.reset()
    env._discount, env._env_id = np.float32(0.5), np.int32(4)
    ts = env.step(0)
    assert float(ts.discount) == 0.5 and int(ts.env_id) == 4
    assert ts.discount.dtype == np.float32 and ts.env_id.dtype == np.int32


@pytest.mark.parametrize("observation,message", [
    ({"a": np.zeros(2)}, "observation returned by the gymnasium env does not match the "
     "observation space: The two nests differ at the root: expected leaf of type "
     "BoundedTensorSpec, got dict with keys ['a']."),
    ((np.zeros(2), ), "observation returned by the gymnasium env does not match the "
     "observation space: The two nests differ at the root: expected leaf of type "
     "BoundedTensorSpec, got tuple of length 1."),
])
def test_observation_structure_errors_unchanged(observation, message):
    env = AlfGymWrapper(_FormsEnv(lambda x: observation), env_info_spec={})
    with pytest.raises(ValueError) as info:
        env.reset()
    assert str(info.value) == message


def test_dict_observation_key_errors_unchanged():
    space = spaces.Dict({"b": spaces.Discrete(2), "a": spaces.Discrete(2)})
    env = AlfGymWrapper(_FormsEnv(lambda x: {"a": 0, "c": 1}, observation_space=space),
                        env_info_spec={})
    with pytest.raises(ValueError, match=r"expected keys \['a', 'b'\], got keys \['a', 'c'\] "
                       r"\(missing \['b'\], unexpected \['c'\]\)"):
        env.reset()


def test_reward_with_dims_rejected():
    env = AlfGymWrapper(_FormsEnv(lambda x: x, reward=np.zeros(2)), env_info_spec={})
    env.reset()
    with pytest.raises(ValueError, match=r"reward: expected a scalar .* got shape \(2,\)"):
        env.step(0)


@pytest.mark.parametrize("copier", [lambda env: pickle.loads(pickle.dumps(env)), copy.deepcopy,
                                    copy.copy])
def test_pickle_and_copies_recompile_the_conversions(copier):
    space = spaces.Dict({"b": spaces.Discrete(3), "a": spaces.Box(-1.0, 1.0, (2, ), np.float32)})
    env = AlfGymWrapper(_ScriptedEnv(observation_space=space, action_space=space, length=100),
                        env_id=3, discount=0.5)
    env.seed(1)
    env.reset()
    clone = copier(env)
    assert clone.action_spec() == env.action_spec()
    action = {"a": np.zeros(2, np.float32), "b": np.int64(2)}
    for ts in (env.step(action), clone.step(action)):
        assert int(ts.env_id) == 3 and float(ts.discount) == 0.5
        assert set(ts.observation) == {"a", "b"} and ts.observation["b"].dtype == np.int64
    assert clone.gym_env.actions[-1] == {"b": 2, "a": pytest.approx([0.0, 0.0])}


class _ProgressEnv(_ScriptedEnv):
    def sync_progress(self, progress):
        self.progress = progress


def test_alf_names_gym_done_and_sync_progress():
    env = AlfGymWrapper(_ProgressEnv(length=1))
    assert env.gym is env.gym_env
    env.reset()
    assert env.done is False
    env.step(1)
    assert env.done is True
    env.sync_progress({"iterations": 2})
    assert env.gym_env.progress == {"iterations": 2}
    # Found on the unwrapped env under gymnasium wrappers too.
    wrapped = AlfGymWrapper(gym.wrappers.RecordEpisodeStatistics(_ProgressEnv()))
    wrapped.sync_progress(0.5)
    assert wrapped.gym_env.unwrapped.progress == 0.5
    AlfGymWrapper(_ScriptedEnv()).sync_progress(0.5)  # an env without it: nothing


# ----- flat steps (what FastParallelEnvironment's workers run) -----------------

def _leaf_bytes(leaves):
    """What a worker copies into its rows: dtype, shape and bytes of each leaf."""
    return [(np.asarray(x).dtype.str, np.asarray(x).shape, np.asarray(x).tobytes())
            for x in leaves]


def _as_stored(leaves, spec):
    """What the rows hold of a flat step's leaves: arrays as they are; the env's
    float and bool scalars (reward, info entries) as numpy stores them into a
    0-d row of the spec dtype; a numpy scalar (a Discrete action, read as
    one) only of the row's own dtype."""
    stored = []
    for leaf, leaf_spec in zip(leaves, nest.flatten(spec)):
        if type(leaf) is not np.ndarray:
            assert tuple(leaf_spec.shape) == ()
            assert type(leaf) in (float, np.float64, bool) or (
                isinstance(leaf, np.integer) and leaf.dtype == leaf_spec.numpy_dtype)
            leaf = np.asarray(leaf, dtype=leaf_spec.numpy_dtype)
        stored.append(leaf)
    return stored


def _flat_outcome(env, flat, action):
    """A worker's step: the flat step; when it declines, the flat reset after
    ``LAST`` (what a group's early reset runs), else ``step()``."""
    try:
        result = flat.step([np.array(x) for x in nest.flatten(action)])
        if result is None and env.done:
            leaves, last = _as_stored(flat.reset(), env.time_step_spec()), False
        elif result is None:
            time_step = env.step(action)
            leaves, last = nest.flatten(time_step), bool(time_step.is_last())
        else:
            leaves, last = result
            assert len(leaves) == len(nest.flatten(env.time_step_spec()))
            leaves = _as_stored(leaves, env.time_step_spec())
        return ("ok", _leaf_bytes(leaves), last)
    except Exception as err:  # noqa: BLE001 -- the same error, type and message, is expected
        return ("error", type(err), str(err))


def _step_outcome(env, action):
    try:
        time_step = env.step(action)
        return ("ok", _leaf_bytes(nest.flatten(time_step)), bool(time_step.is_last()))
    except Exception as err:  # noqa: BLE001 -- compared with the other path's outcome
        return ("error", type(err), str(err))


def _twin_runs(make, num_steps, seed=0, reset=True):
    """Steps two envs from ``make()`` with the same actions, one through
    ``step()`` and ``reset()``, one through its flat step and reset; returns
    both histories."""
    histories = []
    for flat in (False, True):
        env = make()
        flat_steps = env.flat_steps()
        assert flat_steps is not None
        env.seed(seed)
        rng = np.random.RandomState(seed)
        history = []
        if reset:
            first = (lambda env=env, flat_steps=flat_steps: _as_stored(
                flat_steps.reset(), env.time_step_spec())
                     ) if flat else (lambda env=env: nest.flatten(env.reset()))
            history.append(_outcome(lambda first=first: _leaf_bytes(first())))
        for _ in range(num_steps):
            action = nest.map_structure(lambda s, rng=rng: s.numpy_sample(rng=rng),
                                        env.action_spec())
            history.append(_flat_outcome(env, flat_steps, action) if flat
                           else _step_outcome(env, action))
            history.append(_leaf_bytes(nest.flatten(env.current_time_step()))
                           if env.current_time_step() is not None else None)
            history.append((env.done, repr(env.get_info())))
        history.append([repr(a) for a in getattr(env.gym_env, "actions", [])])
        histories.append(history)
    return histories


@pytest.mark.parametrize("space", CONVERTED_SPACES)
@pytest.mark.parametrize("transform", [lambda x: x, _as_float64, _as_torch,
                                       lambda x: (x, )])  # the last: a structure mismatch
@pytest.mark.parametrize("end", ["terminated", "truncated", "both"])
def test_flat_steps_give_what_step_gives(space, transform, end):
    def make():
        return AlfGymWrapper(_FormsEnv(transform, reward=np.float64(0.25),
                                       observation_space=space, action_space=space,
                                       length=4, end=end), env_id=2, discount=0.9)

    step_history, flat_history = _twin_runs(make, 12)
    assert flat_history == step_history


@pytest.mark.parametrize("pattern", ["fixed", "come_go", "type_change"])
def test_flat_steps_give_what_step_gives_with_numeric_infos(pattern):
    from tests.support.gym_envs import NumericInfoEnv

    step_history, flat_history = _twin_runs(
        lambda: AlfGymWrapper(NumericInfoEnv(pattern, episode_length=5)), 40)
    assert flat_history == step_history


def test_flat_reset_resets_as_reset_does():
    env = _wrap(length=2, env_id=3, action_space=spaces.Box(-1.0, 1.0, (2, ), np.float32))
    flat = env.flat_steps()
    env.seed(5)
    env.step(np.zeros(2, np.float32))
    leaves = flat.reset()
    assert env.done is False and env.get_info() is None
    twin = _wrap(length=2, env_id=3, action_space=spaces.Box(-1.0, 1.0, (2, ), np.float32))
    twin.seed(5)
    twin.step(np.zeros(2, np.float32))  # before a reset: a reset
    expected = nest.flatten(twin.reset())
    packed = nest.flatten(env.current_time_step())
    assert [(x.dtype, x.tobytes()) for x in packed] == [
        (x.dtype, x.tobytes()) for x in expected]
    # The shared zeros of prev_action are read-only; the packed time step's are its own.
    zeros = leaves[4]
    assert not zeros.flags.writeable and packed[4].flags.writeable
    assert flat.step([np.ones(2, np.float32)]) is not None  # a plain step follows
    env.close()
    with pytest.raises(EnvironmentClosedError):
        flat.reset()


def test_flat_step_before_reset_and_after_last_declines():
    env = _wrap(length=2)
    flat_step = env.flat_steps().step
    probe_actions = list(env.gym_env.actions)  # the env_info probe's step
    action = [np.array(1)]
    assert flat_step(action) is None  # before the first reset: step() resets
    assert env.gym_env.actions == probe_actions
    env.reset()
    leaves, last = flat_step(action)
    assert not last and int(leaves[0]) == StepType.MID
    leaves, last = flat_step([np.array(2)])
    assert last and int(leaves[0]) == StepType.LAST and float(leaves[2]) == 0.0
    assert flat_step(action) is None  # auto-reset: step() resets and ignores the action
    assert env.gym_env.actions == probe_actions + [1, 2]


def test_flat_step_without_auto_reset_steps_on():
    env = _wrap(length=1, auto_reset=False)
    flat_step = env.flat_steps().step
    env.reset()
    probe_actions = list(env.gym_env.actions)
    assert flat_step([np.array(1)])[1]
    assert flat_step([np.array(2)])[1]  # passed on to the gymnasium env as is
    assert env.gym_env.actions == probe_actions + [1, 2]


def test_current_time_step_after_flat_steps_is_a_time_step_of_its_own():
    env = _wrap(length=5, env_id=3)
    twin = _wrap(length=5, env_id=3)
    flat_step = env.flat_steps().step
    for e in (env, twin):
        e.seed(1)
        e.reset()
    leaves, _ = flat_step([np.array(2)])
    expected = twin.step(np.array(2))
    current = env.current_time_step()
    assert _leaf_bytes(nest.flatten(current)) == _leaf_bytes(nest.flatten(expected))
    assert type(current) is type(expected) and type(current.env_info) is dict
    # Fresh arrays: writing into them changes neither the env nor the next step.
    current.step_type[...] = 99
    assert int(flat_step([np.array(1)])[0][0]) == StepType.MID
    twin.step(np.array(1))
    # A pickled copy carries the time step of its last flat step.
    flat_step([np.array(0)])
    twin.step(np.array(0))
    copied = pickle.loads(pickle.dumps(env))
    assert (_leaf_bytes(nest.flatten(copied.current_time_step()))
            == _leaf_bytes(nest.flatten(twin.current_time_step())))


def test_the_step_after_a_flat_last_step_packs_no_time_step(monkeypatch):
    # A worker's flat steps leave leaves, not a TimeStep: the step() that
    # resets after LAST must not pack them (nor build time_step_spec()) only
    # to drop them, and current_time_step() builds the spec once.
    env = _wrap(length=2)
    flat_step = env.flat_steps().step
    env.reset()
    built = []
    original = AlfGymWrapper.time_step_spec

    def counted(self):
        built.append(1)
        return original(self)

    monkeypatch.setattr(AlfGymWrapper, "time_step_spec", counted)
    for _ in range(3):
        assert flat_step([np.array(1)])[1] is False
        assert flat_step([np.array(1)])[1] is True
        assert flat_step([np.array(1)]) is None
        first = env.step(np.array(1))  # the reset after LAST
        assert int(first.step_type) == StepType.FIRST
    assert built == []
    for _ in range(3):
        flat_step([np.array(2)])
        assert int(env.current_time_step().prev_action) == 2
    assert built == [1]


def test_flat_step_of_a_closed_env_raises():
    env = _wrap()
    flat_step = env.flat_steps().step
    env.reset()
    env.close()
    with pytest.raises(EnvironmentClosedError):
        flat_step([np.array(1)])


def test_subclasses_have_no_flat_step():
    assert _GeneralWrapper(_ScriptedEnv()).flat_steps() is None
    assert _wrap().flat_steps() is not None


def test_flat_step_uses_replaced_discount_env_id_and_action_space():
    env = _wrap(length=3, discount=0.5, env_id=1)
    flat_step = env.flat_steps().step
    env.reset()
    env._discount = np.float32(0.25)
    env._env_id = np.int32(9)
    leaves, _ = flat_step([np.array(1)])
    assert float(leaves[2]) == 0.25 and int(leaves[nest.flatten_with_path(
        env.time_step_spec()).index(("env_id", env.time_step_spec().env_id))]) == 9
    # Another object, read at the next reset: the general conversion.
    env.gym_env.action_space = spaces.Discrete(3, dtype=np.int32)
    env.reset()
    flat_step([np.array(2)])
    assert env.gym_env.actions[-1] == 2 and type(env.gym_env.actions[-1]) is np.int32



@pytest.mark.parametrize("action_space,first,second", [
    (spaces.Discrete(3), 2, 1),
    (spaces.Box(-1.0, 1.0, (2, ), np.float32), [0.5, -0.5], [0.25, 0.75]),
])
def test_flat_step_reads_the_action_rows_and_keeps_none_of_them(action_space, first, second):
    # A worker passes views of its action rows, which the parent overwrites with
    # the next action: what the env and the time step got must not change.
    env = _wrap(action_space=action_space, length=10)
    flat_step = env.flat_steps().step
    env.reset()
    row = np.array(first, dtype=env.action_spec().numpy_dtype)
    leaves, _ = flat_step([row])
    row[...] = second
    sent = env.gym_env.actions[-1]
    prev_action = env.current_time_step().prev_action
    assert np.array_equal(sent, first) and np.array_equal(prev_action, first)
    assert prev_action.dtype == env.action_spec().numpy_dtype
    if isinstance(action_space, spaces.Discrete):
        # The numpy scalar the env got (no copy) is the prev_action leaf.
        assert type(sent) is np.int64 and leaves[4] is sent
    else:
        assert sent is not row and np.array_equal(leaves[4], first)


class _FloatInfoEnv(_ScriptedEnv):
    """Infos of float and bool entries (MuJoCo's kind: Python floats, numpy
    float64 and float32), now and then one of another type or missing."""

    def _info(self):
        c = self._count
        info = {"x": float(c) / 3, "v": np.float64(c) * 1.1, "ok": c % 2 == 0,
                "tiny": 1e-46 * (c + 1),  # rounds to 0 or a subnormal in float32
                "r": np.float32(-0.3 * c)}  # as HalfCheetah's reward_ctrl
        if c % 4 == 3:
            info["v"] = np.float32(c) / 7  # float32 where the entry was float64
        if c % 6 == 5:
            info["x"] = c  # another type: the general conversion
        if c % 5 == 4:
            del info["x"]  # missing: zeros
        return info


@pytest.mark.parametrize("declared", [None, {
    "x": TensorSpec((), torch.float32), "v": TensorSpec((), torch.float32),
    "ok": TensorSpec((), torch.bool), "tiny": TensorSpec((), torch.float32),
    "r": TensorSpec((), torch.float32)}])
def test_flat_steps_keep_float_and_bool_infos_as_the_env_gave_them(declared):
    def make():
        return AlfGymWrapper(_FloatInfoEnv(length=7, end="truncated"),
                             env_info_spec=declared)

    step_history, flat_history = _twin_runs(make, 30)
    assert flat_history == step_history
    # The env's own scalars are the leaves when every entry fits (a numpy
    # float32 as the Python float of its value).
    env = make()
    env.reset()
    leaves, _ = env.flat_steps().step([np.array(1)])
    assert [type(x) for x in leaves[-5:]] == [bool, float, float, np.float64, float]
    assert leaves[-4] == float(np.float32(-0.3))  # r, to the float32's last bit


def test_flat_steps_of_an_env_info_spec_without_entries_fetch_nothing():
    from tests.support.gym_envs import NumericInfoEnv

    step_history, flat_history = _twin_runs(
        lambda: AlfGymWrapper(NumericInfoEnv("fixed", episode_length=5), env_info_spec={}), 20)
    assert flat_history == step_history
    env = AlfGymWrapper(NumericInfoEnv("fixed"), env_info_spec={})
    env.reset()
    leaves, _ = env.flat_steps().step([np.zeros(2, np.float32)])
    assert len(leaves) == len(nest.flatten(env.time_step_spec()))  # no info leaves
