"""``StepType``, ``TimeStep`` and the helpers that build time steps, as ALF's
(docs/contract.rst, "Data model")."""

import collections
from typing import Any, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt
import torch

from alf_env import nest
from alf_env.dtypes import to_numpy
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

__all__ = ["StepType", "TimeStep", "time_step_spec", "generate_time_step", "restart",
           "transition", "termination", "truncation"]


class StepType:
    """Where a ``TimeStep`` sits in an episode: ``np.int32`` constants, which compare with
    Python ints, numpy arrays and torch tensors alike."""

    FIRST = np.int32(0)
    """The first step of an episode (returned by a reset)."""
    MID = np.int32(1)
    """Any step that is neither the first nor the last."""
    LAST = np.int32(2)
    """The last step of an episode (terminated or truncated)."""

    def __new__(cls, value: Any) -> np.int32:  # type: ignore[misc]  # ALF's: an np.int32
        """``value`` as the matching ``np.int32``; ``ValueError`` if it is not 0, 1 or 2."""
        if value in (cls.FIRST, cls.MID, cls.LAST):
            step_type: np.int32 = np.int32(value)
            return step_type
        raise ValueError(f"StepType must be one of FIRST=0, MID=1, LAST=2, got {value!r}")


def _equal(step_type: Any, value: np.int32) -> Any:
    if torch.is_tensor(step_type):
        return torch.eq(step_type, int(value))
    return np.equal(step_type, value)


# The fields and their defaults as literals, so type checkers see them.
class TimeStep(
        collections.namedtuple("TimeStep", ("step_type", "reward", "discount", "observation",
                                            "prev_action", "env_id", "untransformed",
                                            "env_info"),
                               defaults=((), (), (), (), (), (), (), ()))):
    """One step of an environment; every field defaults to ``()``, the empty nest.

    Fields: ``step_type`` (a ``StepType``), ``reward`` (for ``prev_action``),
    ``discount`` (0 when the episode terminated, else the env's discount, also when
    truncated), ``observation``, ``prev_action`` (zeros on ``FIRST``), ``env_id`` (the
    env or row that produced it), ``untransformed`` (``()``, room for data transformers)
    and ``env_info`` (fixed-size numeric extras, ``{}`` by default).
    """

    __slots__ = ()

    def is_first(self) -> Any:
        """Whether ``step_type`` is ``StepType.FIRST`` (element-wise)."""
        return _equal(self.step_type, StepType.FIRST)

    def is_mid(self) -> Any:
        """Whether ``step_type`` is ``StepType.MID`` (element-wise)."""
        return _equal(self.step_type, StepType.MID)

    def is_last(self) -> Any:
        """Whether ``step_type`` is ``StepType.LAST`` (element-wise)."""
        return _equal(self.step_type, StepType.LAST)


def time_step_spec(observation_spec: Any, action_spec: Any,
                   reward_spec: TensorSpec = TensorSpec(()),
                   env_info_spec: Optional[Any] = None) -> TimeStep:
    """Returns the ``TimeStep`` of specs for the given component specs.

    Args:
        observation_spec, action_spec: nests of ``TensorSpec``.
        reward_spec: ``TensorSpec`` of the reward (scalar float32 by default).
        env_info_spec: nest of ``TensorSpec`` for ``env_info``; ``{}`` if omitted.

    Returns:
        A ``TimeStep`` whose ``step_type`` and ``env_id`` are ``TensorSpec((), torch.int32)``
        and ``discount`` ``BoundedTensorSpec((), torch.float32, 0, 1)``.

    Raises:
        TypeError: if a leaf of a spec nest is not a ``TensorSpec``.
    """
    if env_info_spec is None:
        env_info_spec = {}
    for field, specs in (("observation", observation_spec), ("prev_action", action_spec),
                         ("reward", reward_spec), ("env_info", env_info_spec)):
        for path, leaf in nest.flatten_with_path(specs):
            if not isinstance(leaf, TensorSpec):
                raise TypeError(f"time_step_spec: {nest.field_name(field, path)} must be a "
                                f"TensorSpec, got {type(leaf).__name__} ({leaf!r})")
    return TimeStep(
        step_type=TensorSpec((), torch.int32), reward=reward_spec,
        discount=BoundedTensorSpec((), torch.float32, minimum=0.0, maximum=1.0),
        observation=observation_spec, prev_action=action_spec,
        env_id=TensorSpec((), torch.int32), env_info=env_info_spec)


def _uses_torch(observation: Any, use_tensor: Optional[bool]) -> bool:
    if use_tensor is not None:
        return use_tensor
    if type(observation) is np.ndarray:
        return False  # a single numpy leaf (the common case)
    leaves = nest.flatten(observation)
    return bool(leaves) and all(torch.is_tensor(x) for x in leaves)


def _to_np(x: Any, dtype: npt.DTypeLike) -> np.ndarray:
    return np.asarray(to_numpy(x), dtype=dtype)


# Numbers whose ``np.array(x, dtype)`` is what broadcasting to () and copying gives, faster.
_SCALAR_TYPES = frozenset({bool, int, float, np.bool_, np.int8, np.int16, np.int32, np.int64,
                           np.uint8, np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                           np.float64})


def scalar_array(value: Any, dtype: npt.DTypeLike) -> np.ndarray:
    """``np.broadcast_to(_to_np(value, dtype), ()).copy()``: a new 0-d array, faster."""
    return _outer_array(value, dtype, ())


def _outer_array(value: Any, dtype: npt.DTypeLike, outer: Tuple[int, ...]) -> np.ndarray:
    if not outer and type(value) in _SCALAR_TYPES:
        return np.array(value, dtype=dtype)
    array: np.ndarray = np.broadcast_to(_to_np(value, dtype), outer).copy()
    return array


def generate_time_step(batched: bool, observation: Any, step_type: Union[int, np.integer],
                       discount: Any, prev_action: Any = None, action_spec: Any = None,
                       reward: Any = None, reward_spec: TensorSpec = TensorSpec(()),
                       env_id: Any = None, env_info: Any = None,
                       use_tensor: Optional[bool] = None) -> TimeStep:
    """Builds a ``TimeStep`` of numpy arrays or torch tensors.

    ``discount``, ``reward`` and ``env_id`` are scalars or one per row. By default
    ``prev_action`` and ``reward`` are zeros of ``action_spec`` / ``reward_spec``, ``env_id``
    0 or ``arange(batch)``, ``env_info`` ``{}``.

    Args:
        batched: whether the leaves carry a leading batch dimension (its size is read
            from the first observation leaf, or from ``reward``).
        use_tensor: force torch (``True``) or numpy (``False``) outputs; by default
            torch iff all observation leaves are tensors.

    Raises:
        ValueError: if the batch size cannot be determined.
    """
    md_torch = _uses_torch(observation, use_tensor)
    if env_info is None:
        env_info = {}

    outer: Tuple[int, ...] = ()
    if batched:
        candidates = nest.flatten(observation)
        if candidates:
            outer = (int(candidates[0].shape[0]), )
        elif reward is not None:
            outer = (int(np.shape(reward)[0]), )
        else:
            raise ValueError("generate_time_step: cannot infer the batch size "
                             "from an empty observation without a reward")

    if not outer and type(step_type) is np.int32:  # np.full's result, faster
        step_type_a: Any = np.array(step_type)  # these become tensors with md_torch
    else:
        step_type_a = np.full(outer, step_type, dtype=np.int32)
    discount_a: Any = _outer_array(discount, np.float32, outer)
    if reward is None:
        reward_a: Any = reward_spec.numpy_zeros(outer)
    else:
        reward_a = _to_np(reward, reward_spec.numpy_dtype)
    if env_id is None:
        env_id_a: Any = (np.arange(outer[0], dtype=np.int32) if batched
                    else np.zeros((), dtype=np.int32))
    else:
        env_id_a = _outer_array(env_id, np.int32, outer)
    if prev_action is None:
        if action_spec is None:
            raise ValueError("generate_time_step: need prev_action or action_spec")
        prev_action = nest.map_structure(lambda s: s.numpy_zeros(outer), action_spec)
        if md_torch:
            prev_action = nest.map_structure(torch.from_numpy, prev_action)

    if md_torch:
        step_type_a, reward_a, discount_a, env_id_a = (
            torch.as_tensor(f) for f in (step_type_a, reward_a, discount_a, env_id_a))
    return TimeStep(step_type_a, reward_a, discount_a, observation, prev_action,
                    env_id_a, (), env_info)


def _is_batched(reward: Any, reward_spec: TensorSpec) -> bool:
    return np.ndim(reward) > len(reward_spec.shape)  # np.ndim reads a tensor's ndim


def restart(observation: Any, action_spec: Any, reward_spec: TensorSpec = TensorSpec(()),
            env_id: Any = None, env_info: Any = None, batched: bool = False,
            use_tensor: Optional[bool] = None) -> TimeStep:
    """A ``FIRST`` step: zero reward and prev_action (of ``action_spec``), discount 1."""
    return generate_time_step(batched, observation, StepType.FIRST, 1.0,
                              action_spec=action_spec, reward_spec=reward_spec,
                              env_id=env_id, env_info=env_info, use_tensor=use_tensor)


def transition(observation: Any, prev_action: Any, reward: Any,
               reward_spec: TensorSpec = TensorSpec(()), discount: Any = 1.0, env_id: Any = None,
               env_info: Any = None, use_tensor: Optional[bool] = None) -> TimeStep:
    """A ``MID`` step. Batched iff ``reward`` has more dims than ``reward_spec``."""
    return generate_time_step(_is_batched(reward, reward_spec), observation, StepType.MID,
                              discount, prev_action=prev_action, reward=reward,
                              reward_spec=reward_spec, env_id=env_id, env_info=env_info,
                              use_tensor=use_tensor)


def termination(observation: Any, prev_action: Any, reward: Any,
                reward_spec: TensorSpec = TensorSpec(()), env_id: Any = None,
                env_info: Any = None, use_tensor: Optional[bool] = None) -> TimeStep:
    """A ``LAST`` step of a terminated episode: discount 0."""
    return truncation(observation, prev_action, reward, reward_spec, 0.0, env_id, env_info,
                      use_tensor)


def truncation(observation: Any, prev_action: Any, reward: Any,
               reward_spec: TensorSpec = TensorSpec(()), discount: Any = 1.0, env_id: Any = None,
               env_info: Any = None, use_tensor: Optional[bool] = None) -> TimeStep:
    """A ``LAST`` step of a truncated episode: keeps ``discount`` (1 by default)."""
    return generate_time_step(_is_batched(reward, reward_spec), observation,
                              StepType.LAST, discount, prev_action=prev_action,
                              reward=reward, reward_spec=reward_spec, env_id=env_id,
                              env_info=env_info, use_tensor=use_tensor)


_generate_time_step = generate_time_step  # ALF's name
