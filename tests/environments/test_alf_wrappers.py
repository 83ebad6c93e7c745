"""Tests of BatchEnvironmentWrapper."""

import numpy as np
import pytest
import torch

from alf_env import nest
from alf_env.data_structures import StepType
from alf_env.environments.alf_wrappers import AlfEnvironmentBaseWrapper, BatchEnvironmentWrapper
from alf_env.environments.random_alf_environment import RandomAlfEnvironment
from alf_env.errors import EnvironmentClosedError
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

OBS_SPEC = {"pos": BoundedTensorSpec((2, ), torch.float32, -1, 1)}
ACTION_SPEC = BoundedTensorSpec((), torch.int64, 0, 2)
NUM_ENVS = 3


class _Recorder(RandomAlfEnvironment):
    """A RandomAlfEnvironment that records seeds, actions and close calls."""

    def __init__(self, **kwargs):
        super().__init__(OBS_SPEC, ACTION_SPEC, **kwargs)
        self.seeds, self.actions, self.closes = [], [], 0

    def seed(self, seed):
        self.seeds.append(seed)
        super().seed(seed)

    def _step(self, action):
        self.actions.append(int(action))
        return super()._step(action)

    def _close(self):
        self.closes += 1


def _make(n=NUM_ENVS, **kwargs):
    return BatchEnvironmentWrapper([_Recorder(env_id=i, **kwargs) for i in range(n)])


def test_batched_properties_and_specs():
    env = _make()
    assert env.batched and env.batch_size == NUM_ENVS
    member = env.envs[0]
    assert env.observation_spec() == member.observation_spec()
    assert env.action_spec() == member.action_spec()
    assert env.time_step_spec() == member.time_step_spec()
    assert env.env_info_spec() == {}


def test_stacks_time_steps_with_row_env_ids():
    env = _make(episode_end_probability=0.0)
    ts = env.reset()
    assert ts.step_type.shape == (NUM_ENVS, ) and ts.observation["pos"].shape == (NUM_ENVS, 2)
    np.testing.assert_array_equal(ts.env_id, np.arange(NUM_ENVS))
    ts = env.step(np.array([0, 1, 2]))
    assert [e.actions for e in env.envs] == [[0], [1], [2]]
    np.testing.assert_array_equal(ts.prev_action, [0, 1, 2])
    np.testing.assert_array_equal(ts.step_type, [StepType.MID] * NUM_ENVS)
    nest.assert_same_structure(env.time_step_spec(), ts)


def test_rows_reset_independently():
    envs = [_Recorder(max_duration=1), _Recorder(episode_end_probability=0.0)]
    env = BatchEnvironmentWrapper(envs)
    types = [env.reset().step_type.tolist()]
    for _ in range(2):
        types.append(env.step(np.zeros(2, np.int64)).step_type.tolist())
    assert types == [[0, 0], [2, 1], [0, 1]]


def test_seed_rule_member_i_gets_seed_times_n_plus_i():
    env = _make()
    env.seed(5)
    assert [e.seeds for e in env.envs] == [[5 * NUM_ENVS + i] for i in range(NUM_ENVS)]


def test_seeded_runs_reproducible():
    runs = []
    for _ in range(2):
        env = _make(seed=0)
        env.seed(7)
        steps = [env.reset()] + [env.step(np.ones(NUM_ENVS, np.int64)) for _ in range(10)]
        runs.append(np.stack([ts.observation["pos"] for ts in steps]))
    np.testing.assert_array_equal(runs[0], runs[1])
    # Different members got different seeds, so their rows differ.
    assert not np.array_equal(runs[0][:, 0], runs[0][:, 1])


@pytest.mark.parametrize("other,name,detail", [
    (RandomAlfEnvironment({"pos": TensorSpec((3, ))}, ACTION_SPEC), "observation_spec",
     r"at 'pos' expected BoundedTensorSpec\(shape=\(2,\).*got TensorSpec\(shape=\(3,\)"),
    (RandomAlfEnvironment({"pos": OBS_SPEC["pos"], "x": TensorSpec(())}, ACTION_SPEC),
     "observation_spec",
     r"The two nests differ at the root: expected keys \['pos'\], got keys \['pos', 'x'\]"),
    (RandomAlfEnvironment(OBS_SPEC, TensorSpec(())), "action_spec",
     r"at the root expected BoundedTensorSpec"),
])
def test_spec_mismatch_names_member_and_field(other, name, detail):
    with pytest.raises(ValueError,
                       match=rf"envs\[2\]\.{name}\(\) differs from envs\[0\]\.{name}\(\): "
                       rf"{detail}"):
        BatchEnvironmentWrapper([_Recorder(), _Recorder(), other])


def test_rejects_batched_or_empty_members():
    with pytest.raises(ValueError, match=r"envs\[0\] is batched"):
        BatchEnvironmentWrapper([RandomAlfEnvironment(OBS_SPEC, ACTION_SPEC, batch_size=2)])
    with pytest.raises(ValueError, match="at least one environment"):
        BatchEnvironmentWrapper([])


def test_action_batch_dimension_checked():
    env = _make()
    env.reset()
    with pytest.raises(ValueError, match=r"action: expected a leading batch dimension of 3, "
                       r"got shape \(2,\)"):
        env.step(np.zeros(2, np.int64))


def test_close_closes_all_members():
    env = _make()
    env.reset()
    env.close()
    assert [e.closes for e in env.envs] == [1] * NUM_ENVS
    with pytest.raises(EnvironmentClosedError):
        env.step(np.zeros(NUM_ENVS, np.int64))


def test_render_uses_first_member():
    env = _make()
    assert env.render("rgb_array").shape == (2, 2, 3)


def test_nested_actions_are_split_by_row():
    spec = {"move": BoundedTensorSpec((2, ), torch.float32, -1, 1),
            "jump": (BoundedTensorSpec((), torch.int64, 0, 1), )}

    class Recorder(RandomAlfEnvironment):
        def __init__(self):
            super().__init__(OBS_SPEC, spec, episode_end_probability=0.0)
            self.actions = []

        def _step(self, action):
            self.actions.append(action)
            return super()._step(action)

    env = BatchEnvironmentWrapper([Recorder() for _ in range(NUM_ENVS)])
    env.reset()
    action = {"move": np.arange(6, dtype=np.float32).reshape(3, 2) / 10,
              "jump": (np.array([1, 0, 1]), )}
    ts = env.step(action)
    for i, member in enumerate(env.envs):
        got = member.actions[-1]
        assert set(got) == {"move", "jump"} and type(got["jump"]) is tuple
        np.testing.assert_array_equal(got["move"], action["move"][i])
        assert int(got["jump"][0]) == action["jump"][0][i]
    np.testing.assert_array_equal(ts.prev_action["move"], action["move"])
    np.testing.assert_array_equal(ts.prev_action["jump"][0], action["jump"][0])
    with pytest.raises(ValueError, match=r"action\.jump\.0: expected a leading batch "
                       r"dimension of 3, got shape \(2,\)"):
        env.step({"move": action["move"], "jump": (np.zeros(2, np.int64), )})


class _Progressing(_Recorder):
    """Records the progress values pushed by sync_progress."""

    def min_duration_of_inner(self):
        return self._min_duration

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.progress = []

    def sync_progress(self, progress):
        self.progress.append(progress)


def test_sync_progress_reaches_members_that_define_it():
    members = [_Progressing(env_id=0), _Recorder(env_id=1), _Progressing(env_id=2)]
    env = BatchEnvironmentWrapper(members)
    env.sync_progress({"iterations": 7})
    env.sync_progress(0.5)
    assert members[0].progress == [{"iterations": 7}, 0.5] == members[2].progress
    assert not hasattr(members[1], "progress")


class _Doubler(AlfEnvironmentBaseWrapper):
    """An ALF-style wrapper: changes the reward, forwards everything else."""

    def _step(self, action):
        ts = self._env.step(action)
        return ts._replace(reward=ts.reward + 2.0)


def test_base_wrapper_forwards_everything_as_in_alf():
    inner = _Progressing(env_id=4, episode_end_probability=0.0)
    env = _Doubler(inner)
    assert env.wrapped_env() is inner and not env.batched and env.batch_size == 1
    assert env.observation_spec() == OBS_SPEC and env.action_spec() == ACTION_SPEC
    assert env.time_step_spec() == inner.time_step_spec()
    assert env.reward_spec() == inner.reward_spec() and env.env_info_spec() == {}
    assert env.is_tensor_based is False
    env.seed(5)
    assert inner.seeds == [5]
    ts = env.reset()
    assert int(ts.env_id) == 4 and int(ts.step_type) == StepType.FIRST
    ts = env.step(np.int64(1))
    assert float(ts.reward) == 2.0 and inner.actions == [1]
    env.sync_progress(0.25)
    assert inner.progress == [0.25]
    assert env.num_tasks == 1 and env.task_names == ["0"]
    assert env.min_duration_of_inner() == 0  # any other public attribute
    assert env.render("rgb_array").shape == (2, 2, 3)
    with pytest.raises(AttributeError):
        env._not_forwarded  # noqa: B018 -- private names are not forwarded
    env.close()
    assert inner.closes == 1 and env.closed
    with pytest.raises(EnvironmentClosedError):
        env.step(np.int64(0))


def test_base_wrapper_over_a_batched_env():
    env = _Doubler(_make())
    assert env.batched and env.batch_size == NUM_ENVS
    ts = env.step(np.zeros(NUM_ENVS, np.int64))  # before reset: resets
    assert ts.step_type.shape == (NUM_ENVS, )
    np.testing.assert_array_equal(env.step(np.zeros(NUM_ENVS, np.int64)).reward,
                                  [2.0] * NUM_ENVS)
