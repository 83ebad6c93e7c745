"""The compiled per-step conversions of ``AlfGymWrapper``.

The general conversions of
:class:`~alf_env.environments.alf_gym_wrapper.AlfGymWrapper` (its
``_observation_general`` and ``_action_arrays_general`` methods, and
``_fetch_info``) walk generic nests (structure assertion, path strings, dtype
look-ups) on every step. The wrapper's specs are fixed when
it is created, so it compiles them once into small closures that handle the
common case directly: exact ``dict`` / ``tuple`` / ``list`` containers
matching the spec, numpy leaves. A compiled converter never decides an
uncommon case: it raises (``_Fallback``, or whatever numpy raised) and the
caller re-runs the general conversion, which gives the result or the precise
error of before. The conversions have no side effects, so re-running them
is safe. Specs that are not plain dicts, tuples, lists and ``TensorSpec``
leaves are not compiled: they always take the general path.

:mod:`alf_env.environments.gym_env_info` compiles the ``env_info`` fetch the
same way.
"""

import collections
from typing import Any, Callable, Optional

import numpy as np
import torch
from gymnasium import spaces

from alf_env import nest
from alf_env.data_structures import StepType, _scalar_array
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

# What generate_time_step() makes of the step types and the discount 0 of a
# termination, made once; every time step gets its own copy, as before.
_FIRST_ARRAY = _scalar_array(StepType.FIRST, np.int32)
_MID_ARRAY = _scalar_array(StepType.MID, np.int32)
_LAST_ARRAY = _scalar_array(StepType.LAST, np.int32)
_ZERO_DISCOUNT_ARRAY = _scalar_array(0.0, np.float32)
_ONE_DISCOUNT_ARRAY = _scalar_array(1.0, np.float32)


def _field(prefix: str, path: str) -> str:
    """``prefix.path``, or ``prefix`` for the root path ``""``."""
    return f"{prefix}.{path}" if path else prefix


def _to_numpy(value: Any) -> Any:
    """``value`` as a numpy array if it is a torch tensor, else as is."""
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return value


_Converter = Callable[[Any], Any]


class _Fallback(Exception):
    """A compiled converter met an input it does not handle."""


# Containers a compiled converter accepts where the general path accepts any
# Mapping / any tuple or list (``check_types=False``); they have no
# ``__missing__`` and index, iterate and measure like the builtins.
_FAST_MAPPINGS = (dict, collections.OrderedDict)
_FAST_SEQUENCES = (tuple, list)


def _compile_structure(spec: Any, leaf: Callable[[TensorSpec], _Converter]
                       ) -> Optional[_Converter]:
    """Compiles ``map_structure(convert_leaf, spec, x, check_types=False)``.

    Args:
        spec: the spec nest.
        leaf: makes the converter of one ``TensorSpec`` leaf; it must raise
            when the value is nested.

    Returns:
        A converter whose result is what ``nest.map_structure`` packs (the
        spec's container types and key order), or ``None`` if ``spec`` has
        containers other than ``dict``, ``tuple`` and ``list``.
    """
    spec_type = type(spec)
    if spec_type is dict:
        try:
            keys = sorted(spec)
        except TypeError:
            return None  # unorderable keys: the general path sorts by str
        compiled = [_compile_structure(spec[k], leaf) for k in keys]
        children = [child for child in compiled if child is not None]
        if len(children) != len(compiled):
            return None
        pairs = list(zip(keys, children))
        spec_order = list(spec)
        in_sorted_order = spec_order == keys
        size = len(keys)

        def convert_dict(value: Any) -> Any:
            if type(value) not in _FAST_MAPPINGS or len(value) != size:
                raise _Fallback
            # Same size and every spec key present: the same keys. Values are
            # converted in sorted key order, as the general path does, and
            # packed in the spec's key order.
            if in_sorted_order:
                return {k: child(value[k]) for k, child in pairs}
            by_key = {k: child(value[k]) for k, child in pairs}
            return {k: by_key[k] for k in spec_order}

        return convert_dict
    if spec_type is tuple or spec_type is list:
        compiled = [_compile_structure(s, leaf) for s in spec]
        children = [child for child in compiled if child is not None]
        if len(children) != len(compiled):
            return None
        size = len(children)

        def convert_sequence(value: Any) -> Any:
            if type(value) not in _FAST_SEQUENCES or len(value) != size:
                raise _Fallback
            return spec_type([child(v) for child, v in zip(children, value)])

        return convert_sequence
    if isinstance(spec, TensorSpec) and not nest.is_nested(spec):
        return leaf(spec)
    return None


def _observation_leaf(spec: TensorSpec) -> _Converter:
    """``np.asarray(_to_numpy(x), dtype=spec.numpy_dtype)`` for a leaf ``x``."""
    dtype = spec.numpy_dtype

    def convert(value: Any) -> Any:
        if type(value) is np.ndarray:
            # np.asarray returns an ndarray of the requested dtype as is.
            return value if value.dtype is dtype else np.asarray(value, dtype=dtype)
        if nest.is_nested(value):
            raise _Fallback
        return np.asarray(_to_numpy(value), dtype=dtype)

    return convert


def _action_leaf(spec: TensorSpec) -> _Converter:
    """``np.asarray(_to_numpy(x)).astype(dtype)`` after the shape check."""
    shape = tuple(spec.shape)
    dtype = spec.numpy_dtype
    # A numpy scalar of exactly the spec dtype needs no cast: np.array copies
    # it into the same 0-d array that asarray + astype would make.
    scalar_type = dtype.type if shape == () and np.dtype(dtype.type) == dtype else None

    def convert(value: Any) -> np.ndarray:
        value_type = type(value)
        if value_type is np.ndarray:
            # np.asarray(_to_numpy(x)) is x itself for an exact ndarray.
            if value.shape != shape:
                raise _Fallback
            return value.astype(dtype)
        if value_type is scalar_type:
            return np.array(value)
        if nest.is_nested(value):
            raise _Fallback
        array = np.asarray(_to_numpy(value))
        if array.shape != shape:
            raise _Fallback
        return array.astype(dtype)

    return convert


def _compile_zeros(spec: Any) -> Optional[Callable[[], Any]]:
    """Compiles ``nest.map_structure(lambda s: s.numpy_zeros(()), spec)``."""
    spec_type = type(spec)
    if spec_type is dict:
        try:
            keys = sorted(spec)
        except TypeError:
            return None
        compiled_zeros = [_compile_zeros(spec[k]) for k in keys]
        zeros = [child for child in compiled_zeros if child is not None]
        if len(zeros) != len(compiled_zeros):
            return None
        by_spec_order = [zeros[keys.index(k)] for k in spec]
        spec_order = list(spec)
        return lambda: dict(zip(spec_order, [child() for child in by_spec_order]))
    if spec_type is tuple or spec_type is list:
        compiled_zeros = [_compile_zeros(s) for s in spec]
        zeros = [child for child in compiled_zeros if child is not None]
        if len(zeros) != len(compiled_zeros):
            return None
        return lambda: spec_type([child() for child in zeros])
    if type(spec) in (TensorSpec, BoundedTensorSpec):
        # numpy_zeros(()) is np.zeros(() + shape, dtype) for these classes.
        shape, dtype = tuple(spec.shape), spec.numpy_dtype
        return lambda: np.zeros(shape, dtype=dtype)
    return None


def _compile_gym_action(space: spaces.Space) -> _Converter:
    """Compiles ``AlfGymWrapper._to_gym_action(space, action)``."""
    if isinstance(space, spaces.Dict):
        children = [(k, _compile_gym_action(s)) for k, s in space.spaces.items()]
        return lambda action: {k: child(action[k]) for k, child in children}
    if isinstance(space, spaces.Tuple):
        converters = [_compile_gym_action(s) for s in space.spaces]
        return lambda action: tuple(child(a) for child, a in zip(converters, action))
    dtype = space.dtype
    if isinstance(space, spaces.Discrete):

        def to_int(action: Any) -> Any:
            # np.asarray returns a 0-d array of the right dtype as is, and
            # reshape(()) of it is a view: .item() gives the same number.
            if type(action) is np.ndarray and action.dtype is dtype and action.ndim == 0:
                return action.item()
            return np.asarray(action, dtype=dtype).reshape(()).item()

        return to_int

    def to_array(action: Any) -> Any:
        if type(action) is np.ndarray and action.dtype is dtype:
            return action  # what np.asarray returns for it
        return np.asarray(action, dtype=dtype)

    return to_array
