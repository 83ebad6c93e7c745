"""ActionChecker (alf_env.control_plane.spec_checks): what the batched ALF front
ends make of a user's action, and the errors for one that does not fit."""

import numpy as np
import pytest
import torch

from alf_env.control_plane.spec_checks import ActionChecker
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

SPEC = BoundedTensorSpec((2,), torch.float32, -1.0, 1.0)


def _tensor_forms():
    base = torch.arange(8, dtype=torch.float32).reshape(4, 2) / 10
    return {
        "tensor": base.clone(),
        "requires_grad": base.clone().requires_grad_(True),
        "non_contiguous": torch.arange(16, dtype=torch.float32).reshape(4, 4)[:, ::2] / 10,
        "float16": base.clone().half(),       # casts safely to float32
        "numpy": base.numpy().copy(),
        "fortran_numpy": np.asfortranarray(np.arange(8, dtype=np.float32).reshape(2, 4).T),
    }


@pytest.mark.parametrize("form", list(_tensor_forms()))
def test_every_form_gives_c_contiguous_arrays_of_the_spec_dtype(form):
    action = _tensor_forms()[form]
    (leaf,) = ActionChecker(SPEC, 4).flat(action)
    assert type(leaf) is np.ndarray and leaf.dtype == np.float32 and leaf.shape == (4, 2)
    assert leaf.flags.c_contiguous
    expected = np.asarray(action.detach().float().numpy() if torch.is_tensor(action)
                          else action, dtype=np.float32)
    np.testing.assert_array_equal(leaf, expected)


def test_an_exact_tensor_is_viewed_not_copied():
    action = torch.zeros(4, 2)
    (leaf,) = ActionChecker(SPEC, 4).flat(action)
    action[0, 0] = 5.0
    assert leaf[0, 0] == 5.0


@pytest.mark.parametrize("form", list(_tensor_forms()))
def test_single_array_is_the_actions_own_array_or_none(form):
    # What a writer copies as it is when it has exactly the rows' shape and
    # dtype (else it calls flat()): a view of a CPU tensor, a numpy array itself.
    action = _tensor_forms()[form]
    array = ActionChecker(SPEC, 4).single_array(action)
    if form == "requires_grad":
        assert array is None  # .numpy() refuses it: flat() detaches
    elif isinstance(action, np.ndarray):
        assert array is action
    else:
        assert type(array) is np.ndarray and np.shares_memory(array, action.numpy())


def test_single_array_of_a_nest_or_a_list_is_none():
    nested = ActionChecker({"a": SPEC, "b": SPEC}, 4)
    assert nested.single_array({"a": np.zeros((4, 2), np.float32),
                                "b": np.zeros((4, 2), np.float32)}) is None
    assert ActionChecker(SPEC, 4).single_array([[0.0, 0.0]] * 4) is None


@pytest.mark.parametrize("action,message", [
    (torch.zeros(3, 2), r"action: expected shape \(4, 2\) \(batch size 4 x spec shape "
                        r"\(2,\)\) and dtype float32, got shape \(3, 2\)"),
    (torch.zeros(4, 2, dtype=torch.float64), r"action: expected dtype float32 .*got float64"),
    (np.zeros((4, 2), np.int64), r"action: expected dtype float32 .*got int64"),
])
def test_a_wrong_action_names_the_field_expected_and_got(action, message):
    with pytest.raises(ValueError, match=message):
        ActionChecker(SPEC, 4).flat(action)


def test_nested_actions_name_the_leaf():
    spec = {"move": SPEC, "fire": TensorSpec((), torch.int64)}
    checker = ActionChecker(spec, 2)
    fire, move = checker.flat({"move": torch.zeros(2, 2), "fire": torch.tensor([1, 0])})
    assert fire.dtype == np.int64 and move.dtype == np.float32
    with pytest.raises(ValueError, match=r"action.fire: expected shape \(2,\)"):
        checker.flat({"move": torch.zeros(2, 2), "fire": torch.tensor([1, 0, 1])})
    with pytest.raises(ValueError, match="nest structure does not match"):
        checker.flat({"move": torch.zeros(2, 2)})
