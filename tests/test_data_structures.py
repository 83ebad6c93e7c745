"""Tests of alf_env.data_structures."""

import numpy as np
import pytest
import torch

from alf_env import nest
from alf_env.data_structures import (
    StepType,
    TimeStep,
    generate_time_step,
    restart,
    termination,
    time_step_spec,
    transition,
    truncation,
)
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

FIELDS = ("step_type", "reward", "discount", "observation", "prev_action", "env_id",
          "untransformed", "env_info")


def test_step_type_values():
    assert (StepType.FIRST, StepType.MID, StepType.LAST) == (0, 1, 2)
    for member in (StepType.FIRST, StepType.MID, StepType.LAST):
        assert isinstance(member, np.int32)
    assert StepType(2) == StepType.LAST
    with pytest.raises(ValueError, match="must be one of FIRST=0, MID=1, LAST=2, got 3"):
        StepType(3)


def test_step_type_compares_with_arrays_and_tensors():
    array = np.array([0, 1, 2], dtype=np.int32)
    np.testing.assert_array_equal(array == StepType.MID, [False, True, False])
    tensor = torch.tensor([2, 0], dtype=torch.int32)
    assert torch.equal(tensor == StepType.LAST, torch.tensor([True, False]))
    assert torch.equal(StepType.FIRST == tensor, torch.tensor([False, True]))


def test_time_step_fields_and_defaults():
    assert TimeStep._fields == FIELDS
    assert TimeStep() == ((), ) * len(FIELDS)
    ts = TimeStep(step_type=1, reward=2.0)
    assert ts.discount == () and ts.env_info == ()


@pytest.mark.parametrize("step_type,expected", [
    (StepType.FIRST, (True, False, False)),
    (StepType.MID, (False, True, False)),
    (StepType.LAST, (False, False, True)),
])
def test_is_first_mid_last_scalars(step_type, expected):
    ts = TimeStep(step_type=step_type)
    assert (bool(ts.is_first()), bool(ts.is_mid()), bool(ts.is_last())) == expected
    ts = TimeStep(step_type=int(step_type))
    assert (bool(ts.is_first()), bool(ts.is_mid()), bool(ts.is_last())) == expected


def test_is_first_mid_last_numpy_and_torch():
    ts = TimeStep(step_type=np.array([0, 1, 2], dtype=np.int32))
    np.testing.assert_array_equal(ts.is_first(), [True, False, False])
    np.testing.assert_array_equal(ts.is_mid(), [False, True, False])
    np.testing.assert_array_equal(ts.is_last(), [False, False, True])
    ts = TimeStep(step_type=torch.tensor([2, 1, 0], dtype=torch.int32))
    assert torch.is_tensor(ts.is_last())
    assert ts.is_last().tolist() == [True, False, False]
    assert ts.is_mid().tolist() == [False, True, False]
    assert ts.is_first().tolist() == [False, False, True]


def test_time_step_spec_contents():
    obs = {"img": TensorSpec((2, 2), torch.uint8), "pos": TensorSpec((3, ))}
    action = BoundedTensorSpec((), torch.int64, 0, 3)
    reward = TensorSpec((2, ))
    spec = time_step_spec(obs, action, reward)
    assert spec.step_type == TensorSpec((), torch.int32)
    assert spec.discount == BoundedTensorSpec((), torch.float32, 0, 1)
    assert spec.env_id == TensorSpec((), torch.int32)
    assert spec.reward == reward
    assert spec.observation == obs
    assert spec.prev_action == action
    assert spec.untransformed == ()
    assert spec.env_info == {}


def test_time_step_spec_env_info_and_validation():
    info = {"speed": TensorSpec(())}
    spec = time_step_spec(TensorSpec((1, )), TensorSpec((1, )), TensorSpec(()), info)
    assert spec.env_info == info
    with pytest.raises(TypeError, match=r"observation.a must be a TensorSpec, got int"):
        time_step_spec({"a": 3}, TensorSpec(()), TensorSpec(()))


def test_restart_unbatched_numpy():
    action_spec = (BoundedTensorSpec((2, ), torch.int64, 0, 3), TensorSpec(()))
    ts = restart(np.zeros(3, np.float32), action_spec, env_id=5)
    assert int(ts.step_type) == StepType.FIRST and ts.step_type.dtype == np.int32
    assert float(ts.discount) == 1.0 and ts.discount.dtype == np.float32
    assert float(ts.reward) == 0.0 and ts.reward.dtype == np.float32
    assert int(ts.env_id) == 5 and ts.env_id.dtype == np.int32
    assert ts.prev_action[0].dtype == np.int64 and ts.prev_action[0].shape == (2, )
    assert ts.env_info == {} and ts.untransformed == ()
    nest.assert_same_structure(time_step_spec(TensorSpec((3, )), action_spec), ts)


def test_restart_batched_numpy_env_ids():
    ts = restart(np.zeros((4, 2)), TensorSpec((1, )), batched=True)
    np.testing.assert_array_equal(ts.env_id, np.arange(4))
    assert ts.step_type.shape == (4, ) and ts.discount.shape == (4, )
    assert ts.prev_action.shape == (4, 1)


def test_transition_and_termination_and_truncation():
    obs = np.ones((2, 3), np.float32)
    action = np.zeros((2, ), np.int64)
    reward = np.array([1.0, 2.0])
    mid = transition(obs, action, reward, discount=0.9)
    assert mid.step_type.tolist() == [1, 1]
    np.testing.assert_allclose(mid.discount, [0.9, 0.9])
    np.testing.assert_array_equal(mid.env_id, [0, 1])
    last = termination(obs, action, reward)
    assert last.step_type.tolist() == [2, 2] and last.discount.tolist() == [0.0, 0.0]
    cut = truncation(obs, action, reward)
    assert cut.step_type.tolist() == [2, 2] and cut.discount.tolist() == [1.0, 1.0]
    assert cut.reward.dtype == np.float32


def test_torch_time_steps_follow_observation_type():
    ts = termination(torch.zeros(3), torch.zeros(1), 1.5)
    for field in (ts.step_type, ts.reward, ts.discount, ts.env_id):
        assert torch.is_tensor(field)
    assert ts.step_type.dtype == torch.int32 and ts.discount.item() == 0.0
    assert bool(ts.is_last())
    restarted = restart(torch.zeros(2, 3), TensorSpec((1, ), torch.int64), batched=True)
    assert torch.is_tensor(restarted.prev_action)
    assert restarted.prev_action.dtype == torch.int64


def test_generate_time_step_requires_action_source():
    with pytest.raises(ValueError, match="need prev_action or action_spec"):
        generate_time_step(False, np.zeros(1), StepType.FIRST, 1.0)


# ----- fast paths of unbatched numpy time steps -----------------------------------

@pytest.mark.parametrize("discount", [0.5, np.float32(0.5), np.float64(0.5), np.array(0.5),
                                      np.array(0.5, np.float32), torch.tensor(0.5), 1, True])
@pytest.mark.parametrize("env_id", [None, 3, np.int32(3), np.int64(3), np.array(3),
                                    torch.tensor(3)])
@pytest.mark.parametrize("step_type", [StepType.MID, 1, np.int64(1)])
def test_unbatched_scalar_fields_are_new_0d_arrays(discount, env_id, step_type):
    ts = generate_time_step(False, np.zeros(2, np.float32), step_type, discount,
                            prev_action=np.zeros((), np.int64), reward=1.0, env_id=env_id)
    expected_id = 0 if env_id is None else 3
    for field, dtype, value in ((ts.step_type, np.int32, 1),
                                (ts.discount, np.float32, float(np.float32(discount))),
                                (ts.env_id, np.int32, expected_id)):
        assert type(field) is np.ndarray and field.shape == () and field.dtype == dtype
        assert field.flags.writeable and field.flags.owndata and field.base is None
        assert field.item() == value
    again = generate_time_step(False, np.zeros(2, np.float32), step_type, discount,
                               prev_action=np.zeros((), np.int64), reward=1.0, env_id=env_id)
    # Every time step has its own arrays.
    assert again.step_type is not ts.step_type and again.discount is not ts.discount
    assert again.env_id is not ts.env_id
    if isinstance(discount, np.ndarray):
        assert ts.discount is not discount


def test_unbatched_scalar_fields_reject_arrays_with_dims():
    with pytest.raises(ValueError):
        generate_time_step(False, np.zeros(2), StepType.MID, np.ones(2), prev_action=0,
                           reward=1.0)
    with pytest.raises(ValueError):
        generate_time_step(False, np.zeros(2), StepType.MID, 1.0, prev_action=0, reward=1.0,
                           env_id=np.arange(2))


def test_reward_array_of_spec_dtype_is_kept_and_time_step_type_follows_leaves():
    reward = np.array(2.0, np.float32)
    ts = transition(np.zeros(2, np.float32), np.zeros((), np.int64), reward)
    assert ts.reward is reward
    assert isinstance(ts, TimeStep) and ts.untransformed == () and ts.env_info == {}
    # A single numpy leaf, an empty observation and mixed leaves give numpy.
    assert isinstance(transition((), 0, reward).step_type, np.ndarray)
    mixed = transition({"a": torch.zeros(1), "b": np.zeros(1)}, 0, reward)
    assert isinstance(mixed.step_type, np.ndarray)
    assert torch.is_tensor(transition(torch.zeros(1), 0, reward).step_type)
    assert torch.is_tensor(transition(np.zeros(1), 0, reward, use_tensor=True).discount)
