"""FastVectorEnv behaves as gymnasium's AsyncVectorEnv: each behaviour asserted once, for both.

Every test below runs the same calls and the same assertions on
``gymnasium.vector.AsyncVectorEnv`` and on ``FastVectorEnv`` (one env per
worker, two envs per worker, and its pipe path, ``shared_memory=False``): the
assertions state what gymnasium does, and passing on ``AsyncVectorEnv`` shows
that they do. The few tests of what alf_env
does where gymnasium does not check (integer actions that do not fit, which env
raised) run on ``FastVectorEnv`` alone and say so.
"""

import functools
import re
from typing import Any, Callable, List, Optional

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from alf_env.errors import EnvironmentProcessError
from alf_env.vector import FastVectorEnv

NUM_ENVS = 4
BOX = spaces.Box(-1.0, 1.0, (1,), np.float32)
# Values a float32 holds exactly, one per env.
VALUES = [0.5, -0.25, 0.125, 1.0]

VectorEnvFactory = Callable[[List[Callable[[], gym.Env]]], gym.vector.VectorEnv]
VECTOR_ENVS = {
    "AsyncVectorEnv": lambda fns: gym.vector.AsyncVectorEnv(fns, context="fork"),
    "FastVectorEnv": lambda fns: FastVectorEnv(fns, envs_per_worker=1),
    "FastVectorEnv_2_per_worker": lambda fns: FastVectorEnv(fns, envs_per_worker=2),
    "FastVectorEnv_pipe": lambda fns: FastVectorEnv(fns, shared_memory=False, envs_per_worker=2),
}
FAST_ONLY = [name for name in VECTOR_ENVS if name != "AsyncVectorEnv"]


@pytest.fixture(params=list(VECTOR_ENVS))
def make_envs(request) -> VectorEnvFactory:
    return VECTOR_ENVS[request.param]


def describe(value: Any) -> Any:
    """What a value is, exactly: its type, dtype, shape and value (tuples and
    dicts item by item)."""
    if isinstance(value, tuple):
        return ("tuple", tuple(describe(v) for v in value))
    if isinstance(value, dict):
        return ("dict", {k: describe(v) for k, v in value.items()})
    if isinstance(value, (np.ndarray, np.generic)):
        return (type(value).__name__, str(value.dtype), value.shape, value.tolist())
    return (type(value).__name__, value)


class ActionRecorder(gym.Env):
    """Records the action it receives (``seen()`` describes it) and counts its steps.

    ``fault_at`` makes ``step``, ``reset`` or ``fail()`` raise ``ValueError``.
    """

    def __init__(self, action_space: gym.Space = BOX, env_id: int = 0,
                 fault_at: str = "") -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = action_space
        self.env_id = env_id
        self.fault_at = fault_at
        self.steps = 0
        self.last: Any = None

    def _maybe_fail(self, phase: str) -> None:
        if self.fault_at == phase:
            raise ValueError(f"env {self.env_id} failed in {phase}")

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._maybe_fail("reset")
        return np.full(1, self.steps, np.float32), {}

    def step(self, action):
        self._maybe_fail("step")
        self.last = action
        self.steps += 1
        return np.full(1, self.steps, np.float32), 0.0, False, False, {}

    def seen(self) -> Any:
        return describe(self.last)

    def fail(self) -> int:
        self._maybe_fail("call")
        return self.env_id


def recorders(space: gym.Space = BOX, fault_env: int = -1, fault_at: str = ""
              ) -> List[Callable[[], gym.Env]]:
    return [functools.partial(ActionRecorder, space, i, fault_at if i == fault_env else "")
            for i in range(NUM_ENVS)]


def _array(dtype: str, shape: tuple, value: Any) -> tuple:
    return ("ndarray", dtype, shape, value)


# (space, the batch, what env i receives)
ACTION_KINDS = {
    "float64_array_for_float32_box": (
        BOX, np.array([[v] for v in VALUES]),
        [_array("float64", (1,), [v]) for v in VALUES]),
    "float32_array": (
        BOX, np.array([[v] for v in VALUES], np.float32),
        [_array("float32", (1,), [v]) for v in VALUES]),
    "python_float_lists": (
        BOX, [[v] for v in VALUES], [("list", [v]) for v in VALUES]),
    "python_int_lists_for_float_box": (
        BOX, [[i] for i in range(NUM_ENVS)], [("list", [i]) for i in range(NUM_ENVS)]),
    "shape_n_for_n_by_1": (
        BOX, np.array(VALUES), [("float64", "float64", (), v) for v in VALUES]),
    "python_floats_for_n_by_1": (
        BOX, list(VALUES), [("float", v) for v in VALUES]),
    "list_of_arrays_of_two_dtypes": (
        BOX, [np.full(1, v, np.float32 if i % 2 else np.float64) for i, v in enumerate(VALUES)],
        [_array("float32" if i % 2 else "float64", (1,), [v]) for i, v in enumerate(VALUES)]),
    "discrete_int64_array": (
        spaces.Discrete(3), np.arange(NUM_ENVS) % 3,
        [("int64", "int64", (), i % 3) for i in range(NUM_ENVS)]),
    "discrete_int32_array": (
        spaces.Discrete(3), (np.arange(NUM_ENVS) % 3).astype(np.int32),
        [("int32", "int32", (), i % 3) for i in range(NUM_ENVS)]),
    "discrete_python_ints": (
        spaces.Discrete(3), [i % 3 for i in range(NUM_ENVS)],
        [("int", i % 3) for i in range(NUM_ENVS)]),
    "discrete_mixed_list": (
        spaces.Discrete(3), [np.int64(0), 1, True, np.uint8(2)],
        [("int64", "int64", (), 0), ("int", 1), ("bool", True), ("uint8", "uint8", (), 2)]),
    "multi_discrete_int64_for_int32_space": (
        spaces.MultiDiscrete([3, 3], dtype=np.int32), np.array([[i % 3, 1] for i in range(4)]),
        [_array("int64", (2,), [i % 3, 1]) for i in range(NUM_ENVS)]),
    "multi_binary_python_lists": (
        spaces.MultiBinary(2), [[i % 2, 1] for i in range(NUM_ENVS)],
        [("list", [i % 2, 1]) for i in range(NUM_ENVS)]),
    "tuple_space": (
        spaces.Tuple((spaces.Discrete(2), BOX)),
        (np.arange(NUM_ENVS) % 2, np.array([[v] for v in VALUES])),
        [("tuple", (("int64", "int64", (), i % 2), _array("float64", (1,), [v])))
         for i, v in enumerate(VALUES)]),
    "dict_space": (
        spaces.Dict({"a": spaces.Discrete(2), "b": BOX}),
        {"a": [i % 2 for i in range(NUM_ENVS)], "b": np.array(VALUES, np.float32)},
        [("dict", {"a": ("int", i % 2), "b": ("float32", "float32", (), v)})
         for i, v in enumerate(VALUES)]),
}


@pytest.mark.parametrize("kind", list(ACTION_KINDS))
def test_each_env_receives_its_item_of_the_batch(make_envs, kind):
    # AsyncVectorEnv.step_async sends env i the i-th item of
    # gymnasium.vector.utils.iterate(action_space, actions): the caller's own
    # type, dtype, shape and value, never a cast.
    space, batch, expected = ACTION_KINDS[kind]
    envs = make_envs(recorders(space))
    try:
        envs.reset(seed=0)
        envs.step(batch)
        assert list(envs.call("seen")) == expected
    finally:
        envs.close()


@pytest.mark.parametrize("actions", [np.zeros((2, 1)), [[0.5], [-0.5]]],
                         ids=["float64", "python_lists"])
def test_pendulum_steps_with_what_numpy_policies_make(make_envs, actions):
    envs = make_envs([lambda: gym.make("Pendulum-v1")] * 2)
    reference = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2)
    try:
        envs.reset(seed=0)
        reference.reset(seed=0)
        got, expected = envs.step(actions), reference.step(actions)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    finally:
        envs.close()
        reference.close()


def test_a_batch_that_cannot_be_iterated_raises_type_error(make_envs):
    envs = make_envs(recorders(spaces.Discrete(3)))
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match="Unable to iterate over the following elements: 0"):
            envs.step(0)
        envs.step(np.zeros(NUM_ENVS, np.int64))  # nothing was sent: the envs step on
        assert envs.get_attr("steps") == (1,) * NUM_ENVS
    finally:
        envs.close()


def test_a_batch_of_another_length_raises_value_error(make_envs):
    envs = make_envs(recorders(spaces.Discrete(3)))
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError):
            envs.step_async(np.zeros(NUM_ENVS + 1, np.int64))
    finally:
        envs.close()


@pytest.mark.parametrize("mask, error, message", [
    (np.array([1, 0, 1, 0]), TypeError, "`options['reset_mask']` must have `dtype=np.bool_`, "
                                        "got int64"),
    ([True, False, True, False], TypeError, "`options['reset_mask']` must be a numpy array, "
                                            "got <class 'list'>"),
    (np.ones(3, np.bool_), ValueError, "`options['reset_mask']` must have shape `(4,)`, "
                                       "got (3,)"),
    (np.zeros(4, np.bool_), ValueError, "`options['reset_mask']` must contain a boolean "
                                        "array with at least one True value"),
], ids=["int_mask", "list_mask", "wrong_shape", "no_true"])
def test_a_bad_reset_mask_raises_gymnasiums_error(make_envs, mask, error, message):
    envs = make_envs(recorders())
    try:
        envs.reset(seed=0)
        with pytest.raises(error, match=re.escape(message)):
            envs.reset(options={"reset_mask": mask})
        envs.reset(options={"reset_mask": np.array([True, False, True, False])})
    finally:
        envs.close()


@pytest.mark.parametrize("pending", ["reset", "step", "call"])
def test_close_while_a_call_is_pending_warns_and_closes(make_envs, pending):
    envs = make_envs(recorders())
    envs.reset(seed=0)
    if pending == "reset":
        envs.reset_async(seed=1)
    elif pending == "step":
        envs.step_async(np.zeros((NUM_ENVS, 1), np.float32))
    else:
        envs.call_async("fail")
    with pytest.warns(UserWarning, match=re.escape(
            f"Calling `close` while waiting for a pending call to `{pending}` to complete.")):
        envs.close()
    assert envs.closed
    # The autouse fixture checks that no worker process is left.


# -- what FastVectorEnv checks where AsyncVectorEnv passes the value on -----------


@pytest.fixture(params=FAST_ONLY)
def make_fast_envs(request) -> VectorEnvFactory:
    return VECTOR_ENVS[request.param]


@pytest.mark.parametrize("space, batch, message", [
    (spaces.Discrete(3), np.array([0.0, np.nan, 1.0, 2.0]),
     r"action: expected dtype int64 .*'same_kind' rule\), got the actions of dtype float64 "
     r"\(env 1's action holds nan, which is no integer\)"),
    (spaces.Discrete(3), [0, 1, 2.5, 0],
     r"action: expected dtype int64 .*got env 2's action of dtype float64"),
    (spaces.MultiDiscrete([3], dtype=np.int32), np.array([[0], [1], [2], [1 << 40]]),
     r"action: env 3's action holds 1099511627776, outside the range "
     r"\[-2147483648, 2147483647\] of the space's dtype int32"),
    (spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(1))),
     (np.zeros(4, np.int64), [[0], [1], [300], [0]]),
     r"action\[1\]: env 2's action holds 300, outside the range \[-128, 127\]"),
    (BOX, np.zeros((NUM_ENVS, 2)),
     r"action: expected shape \(4, 1\) \(a batch of 4 x space shape \(1,\), or per env a "
     r"shape that broadcasts to it\) and dtype float32, got shape \(4, 2\)"),
], ids=["nan_for_discrete", "float_in_a_list", "int64_beyond_int32", "beyond_int8",
        "shape_that_does_not_broadcast"])
def test_integer_actions_that_do_not_fit_are_refused_naming_env_and_field(
        make_fast_envs, space, batch, message):
    # AsyncVectorEnv passes these on; FastVectorEnv refuses them before
    # anything is sent (an integer space never sees NaN or a wrapped value).
    envs = make_fast_envs(recorders(space))
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=message):
            envs.step(batch)
        assert envs.get_attr("steps") == (0,) * NUM_ENVS
    finally:
        envs.close()


@pytest.mark.parametrize("phase", ["step", "reset", "call"])
def test_an_env_error_names_the_env_that_raised_it(make_fast_envs, phase):
    # With two envs per worker, env 3 shares its worker with env 2: the error
    # names env 3 (gymnasium's AsyncVectorEnv logs "Worker-3" and re-raises
    # the bare exception).
    envs = make_fast_envs(recorders(fault_env=3, fault_at=phase))
    try:
        if phase != "reset":
            envs.reset(seed=0)
        with pytest.raises(ValueError, match=f"env 3 failed in {phase}") as info:
            if phase == "step":
                envs.step(np.zeros((NUM_ENVS, 1), np.float32))
            elif phase == "reset":
                envs.reset(seed=0)
            else:
                envs.call("fail")
        cause = info.value.__cause__
        assert isinstance(cause, EnvironmentProcessError) and cause.env_id == 3
        assert "raised in the worker of env 3 " in str(cause)
        assert "env 3" in "".join(info.value.__notes__)
        assert "env 2" not in str(cause) + "".join(info.value.__notes__)
    finally:
        envs.close()
