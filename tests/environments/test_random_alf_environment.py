"""Tests of RandomAlfEnvironment."""

import inspect

import numpy as np
import pytest
import torch

from alf_env import nest
from alf_env.data_structures import StepType
from alf_env.environments.random_alf_environment import RandomAlfEnvironment
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

OBS_SPEC = {
    "image": BoundedTensorSpec((2, 2), torch.uint8, 0, 255),
    "pos": BoundedTensorSpec((3, ), torch.float32, -1.0, 1.0),
    "free": TensorSpec((2, ), torch.float32),
}
ACTION_SPEC = BoundedTensorSpec((2, ), torch.int64, 0, 4)
BATCH = 3
NUM_STEPS = 60


def _action(batch_size=None):
    outer = () if batch_size is None else (batch_size, )
    return np.ones(outer + (2, ), dtype=np.int64)


def _run(env, num_steps, batch_size=None):
    steps = [env.reset()]
    for _ in range(num_steps):
        steps.append(env.step(_action(batch_size)))
    return steps


def _assert_steps_equal(a, b):
    for x, y in zip(a, b):
        for u, v in zip(nest.flatten(x), nest.flatten(y)):
            np.testing.assert_array_equal(u, v)


def test_constructor_signature_matches_api():
    params = inspect.signature(RandomAlfEnvironment).parameters
    positional = [name for name, p in params.items() if p.kind != p.KEYWORD_ONLY]
    assert positional == [
        "observation_spec", "action_spec", "env_id", "episode_end_probability",
        "discount", "reward_fn", "batch_size", "seed", "render_size", "min_duration",
        "max_duration", "use_tensor_time_step"
    ]
    # alf_env's addition is keyword-only, after ALF's arguments.
    assert [name for name in params if name not in positional] == ["strict_action_shape"]
    assert params["strict_action_shape"].default is False
    defaults = {name: p.default for name, p in params.items()}
    assert defaults["env_id"] is None and defaults["episode_end_probability"] == 0.1
    assert defaults["discount"] == 1.0 and defaults["reward_fn"] is None
    assert defaults["batch_size"] is None and defaults["seed"] == 42
    assert defaults["render_size"] == (2, 2, 3) and defaults["min_duration"] == 0
    assert defaults["max_duration"] is None and defaults["use_tensor_time_step"] is False


def test_unbatched_outputs_are_numpy_and_follow_specs():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, env_id=7)
    assert not env.batched and env.batch_size == 1
    assert isinstance(env._rng, np.random.RandomState)
    for ts in _run(env, 10):
        nest.assert_same_structure(env.time_step_spec(), ts)
        for leaf in nest.flatten(ts):
            assert isinstance(leaf, np.ndarray)
        assert ts.observation["image"].dtype == np.uint8
        assert ts.observation["image"].shape == (2, 2)
        pos = ts.observation["pos"]
        assert pos.dtype == np.float32 and np.all((pos >= -1) & (pos <= 1))
        free = ts.observation["free"]
        assert np.all((free >= 0) & (free <= 1))
        assert int(ts.env_id) == 7 and ts.step_type.dtype == np.int32


def test_batched_shapes_and_env_ids():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH)
    assert env.batched and env.batch_size == BATCH
    for ts in _run(env, 5, BATCH):
        assert ts.step_type.shape == (BATCH, )
        assert ts.reward.shape == (BATCH, ) and ts.discount.shape == (BATCH, )
        assert ts.observation["image"].shape == (BATCH, 2, 2)
        assert ts.prev_action.shape == (BATCH, 2)
        np.testing.assert_array_equal(ts.env_id, np.arange(BATCH))


def test_use_tensor_time_step_gives_torch():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH,
                               use_tensor_time_step=True)
    assert env.is_tensor_based
    ts = env.step(torch.ones(BATCH, 2, dtype=torch.int64))
    ts = env.step(torch.ones(BATCH, 2, dtype=torch.int64))
    for leaf in nest.flatten(ts):
        assert torch.is_tensor(leaf)
    assert ts.observation["image"].dtype == torch.uint8
    assert ts.step_type.dtype == torch.int32


def test_same_seed_reproduces_and_seed_method_reseeds():
    a = _run(RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, seed=3), 20)
    b = _run(RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, seed=3), 20)
    _assert_steps_equal(a, b)
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, seed=99)
    env.seed(3)
    _assert_steps_equal(a, _run(env, 20))
    other = _run(RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, seed=4), 20)
    assert not np.array_equal(a[0].observation["pos"], other[0].observation["pos"])


def test_episode_end_probability_one_ends_every_step():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, episode_end_probability=1.0)
    types = [int(ts.step_type) for ts in _run(env, 6)]
    assert types == [0, 2, 0, 2, 0, 2, 0]


def test_episode_end_probability_zero_never_ends():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, episode_end_probability=0.0)
    types = [int(ts.step_type) for ts in _run(env, NUM_STEPS)]
    assert types[0] == StepType.FIRST and set(types[1:]) == {StepType.MID}


@pytest.mark.parametrize("min_duration,max_duration", [(3, 5), (0, 1), (4, 4)])
def test_min_and_max_duration_bound_episode_length(min_duration, max_duration):
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, episode_end_probability=0.5,
                               min_duration=min_duration, max_duration=max_duration)
    lengths, length = [], 0
    for ts in _run(env, NUM_STEPS)[1:]:
        if ts.is_first():
            length = 0
            continue
        length += 1
        if ts.is_last():
            lengths.append(length)
    assert lengths
    assert all(max(min_duration, 1) <= n <= max_duration for n in lengths)


def test_last_discount_zero_and_mid_discount_given():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, discount=0.5, min_duration=2,
                               max_duration=2)
    steps = _run(env, 3)
    assert [int(ts.step_type) for ts in steps] == [0, 1, 2, 0]
    assert [float(ts.discount) for ts in steps] == [1.0, 0.5, 0.0, 1.0]


def test_reward_fn_receives_step_type_action_and_observation():
    calls = []

    def reward_fn(step_type, action, observation):
        calls.append((step_type, action.copy(), set(observation)))
        return np.full((BATCH, ), float(step_type), dtype=np.float32)

    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH, reward_fn=reward_fn,
                               min_duration=2, max_duration=2)
    steps = _run(env, 2, BATCH)
    assert [c[0] for c in calls] == [StepType.MID, StepType.LAST]
    np.testing.assert_array_equal(calls[0][1], _action(BATCH))
    assert calls[0][2] == set(OBS_SPEC)
    np.testing.assert_array_equal(steps[2].reward, [2.0] * BATCH)
    np.testing.assert_array_equal(steps[0].reward, [0.0] * BATCH)


def test_reward_fn_with_wrong_shape_rejected():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH,
                               reward_fn=lambda *_: np.zeros(BATCH + 1))
    env.reset()
    with pytest.raises(ValueError, match=r"expected a reward of shape \(3,\), got shape \(4,\)"):
        env.step(_action(BATCH))


def test_per_row_discount_validated():
    with pytest.raises(ValueError, match=r"discount: expected a scalar or shape \(3,\)"):
        RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH, discount=[1.0, 1.0])
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH,
                               discount=[0.1, 0.2, 0.3], episode_end_probability=0.0)
    np.testing.assert_allclose(_run(env, 1, BATCH)[1].discount, [0.1, 0.2, 0.3])


def test_action_checked_against_spec():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, strict_action_shape=True)
    env.reset()
    with pytest.raises(ValueError, match=r"action: expected shape \(2,\) and dtype int64, "
                       r"got shape \(3,\)"):
        env.step(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="does not match the action spec"):
        env.step((np.zeros(2, np.int64), ))


def test_render_is_random_uint8_of_render_size():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, render_size=(4, 5, 3))
    image = env.render("rgb_array")
    assert image.shape == (4, 5, 3) and image.dtype == np.uint8
    with pytest.raises(ValueError, match="mode must be 'rgb_array', got 'human'"):
        env.render("human")


def test_invalid_constructor_arguments():
    with pytest.raises(ValueError, match="episode_end_probability must be in"):
        RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, episode_end_probability=1.5)
    with pytest.raises(ValueError, match="max_duration must be >="):
        RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, min_duration=5, max_duration=3)


@pytest.mark.parametrize("action", [
    np.ones(2, np.int64), np.ones(2, np.int32), np.ones(2, np.float64),
    torch.ones(2, dtype=torch.int64), np.asfortranarray(np.ones((2, 2), np.int64))[:, 0],
])
@pytest.mark.parametrize("nested", [False, True])
def test_leaf_action_conversion_matches_nested_spec(action, nested):
    # A leaf action spec skips the nest walk; a one-leaf tuple spec takes it.
    # The converted actions must be alike.
    spec = (ACTION_SPEC, ) if nested else ACTION_SPEC
    env = RandomAlfEnvironment(OBS_SPEC, spec, episode_end_probability=0.0)
    env.reset()
    ts = env.step((action, ) if nested else action)
    prev_action = ts.prev_action[0] if nested else ts.prev_action
    assert type(prev_action) is np.ndarray and prev_action.dtype == np.int64
    assert prev_action.shape == (2, ) and prev_action.flags.c_contiguous
    assert prev_action.flags.owndata and prev_action.flags.writeable
    np.testing.assert_array_equal(prev_action, [1, 1])
    if isinstance(action, np.ndarray):
        assert prev_action is not action


def test_alf_checks_only_the_action_structure():
    """ALF's random env checks the nest structure of an action, not its shapes."""
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, episode_end_probability=0.0)
    env.reset()
    ts = env.step(np.zeros(3, np.int64))
    assert ts.step_type == StepType.MID and ts.prev_action.shape == (3, )
    with pytest.raises(ValueError, match="does not match the action spec"):
        env.step((np.zeros(2, np.int64), ))
    with pytest.raises(RuntimeError, match="does not match the action spec"):
        env.step((np.zeros(2, np.int64), ))  # also what ALF's nest raises


def test_alf_batched_env_takes_one_action_for_the_whole_batch():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH,
                               episode_end_probability=0.0)
    env.reset()
    ts = env.step(np.array(7, np.int64))  # any shape: repeated for every row
    assert ts.prev_action.shape == (BATCH, ) and np.all(ts.prev_action == 7)
    ts = env.step(np.arange(2, dtype=np.int64))
    np.testing.assert_array_equal(ts.prev_action, [[0, 1]] * BATCH)
    batch = np.arange(BATCH * 2, dtype=np.int64).reshape(BATCH, 2)
    np.testing.assert_array_equal(env.step(batch).prev_action, batch)


def test_leaf_action_batched_broadcast_and_errors():
    env = RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=BATCH,
                               episode_end_probability=0.0, strict_action_shape=True)
    env.reset()
    ts = env.step(np.array([1, 2], np.int64))  # one action for every row
    np.testing.assert_array_equal(ts.prev_action, [[1, 2]] * BATCH)
    assert ts.prev_action.flags.writeable and ts.prev_action.flags.owndata
    with pytest.raises(ValueError, match=r"action: expected shape \(3, 2\) and dtype int64, "
                       r"got shape \(2, 3\)"):
        env.step(np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="does not match the action spec: The two nests "
                       "differ at the root: expected leaf of type BoundedTensorSpec, got "
                       "list of length 2"):
        env.step([np.zeros(2, np.int64)] * 2)
