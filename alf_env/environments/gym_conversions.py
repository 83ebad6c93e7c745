"""The compiled per-step conversions of ``AlfGymWrapper``, and its ``env_info`` fetch.

The general conversions walk generic nests every step; the specs are fixed, so the common
case (exact dicts, tuples and lists, numpy leaves) is compiled once into closures. These
never decide an uncommon case: they raise, and the caller re-runs the general conversion
(which has no side effects) for the result or the precise error.
"""

import collections
import collections.abc
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from gymnasium import spaces

from alf_env import nest
from alf_env.data_structures import StepType, scalar_array
from alf_env.dtypes import to_numpy as to_numpy  # re-exported for alf_gym_wrapper
from alf_env.nest import field_name, join_path
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

# What generate_time_step() makes of step types and discounts; each time step gets a copy.
FIRST_ARRAY = scalar_array(StepType.FIRST, np.int32)
MID_ARRAY = scalar_array(StepType.MID, np.int32)
LAST_ARRAY = scalar_array(StepType.LAST, np.int32)
ZERO_DISCOUNT_ARRAY = scalar_array(0.0, np.float32)
ONE_DISCOUNT_ARRAY = scalar_array(1.0, np.float32)


Converter = Callable[[Any], Any]


class _Fallback(Exception):
    """A compiled converter met an input it does not handle."""


# Where the general path takes any Mapping / tuple or list: these behave like the builtins.
_FAST_MAPPINGS = (dict, collections.OrderedDict)
_FAST_SEQUENCES = (tuple, list)


def _sorted_keys(spec: Dict[Any, Any]) -> Optional[List[Any]]:
    """``sorted(spec)``, or ``None`` for unorderable keys (left to the general path)."""
    try:
        return sorted(spec)
    except TypeError:
        return None


def _compile_all(compile_one: Callable[[Any], Any], specs: List[Any]) -> Optional[List[Any]]:
    """``compile_one`` of each spec, or ``None`` if one of them is not compilable."""
    compiled = [compile_one(s) for s in specs]
    return None if any(c is None for c in compiled) else compiled


def compile_structure(spec: Any, leaf: Callable[[TensorSpec], Optional[Converter]]
                      ) -> Optional[Converter]:
    """Compiles ``map_structure(convert_leaf, spec, x, check_types=False)``, ``leaf`` making
    each leaf's converter (which raises for a nest) or ``None``; ``None`` for other containers."""
    spec_type = type(spec)
    if spec_type is dict:
        keys = _sorted_keys(spec)
        children = None if keys is None else _compile_all(
            lambda k: compile_structure(spec[k], leaf), keys)
        if keys is None or children is None:
            return None
        pairs = list(zip(keys, children))
        spec_order = list(spec)
        in_sorted_order = spec_order == keys
        size = len(keys)

        def convert_dict(value: Any) -> Any:
            if type(value) not in _FAST_MAPPINGS or len(value) != size:
                raise _Fallback
            # Converted in sorted key order, as the general path does; packed in the spec's.
            by_key = {k: child(value[k]) for k, child in pairs}
            return by_key if in_sorted_order else {k: by_key[k] for k in spec_order}

        return convert_dict
    if spec_type is tuple or spec_type is list:
        children = _compile_all(lambda s: compile_structure(s, leaf), list(spec))
        if children is None:
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


def observation_leaf(spec: TensorSpec) -> Converter:
    """``np.asarray(to_numpy(x), dtype=spec.numpy_dtype)`` for a leaf ``x``."""
    dtype = spec.numpy_dtype

    def convert(value: Any) -> Any:
        if type(value) is np.ndarray:
            return value if value.dtype is dtype else np.asarray(value, dtype=dtype)
        if nest.is_nested(value):
            raise _Fallback
        return np.asarray(to_numpy(value), dtype=dtype)

    return convert


def action_leaf(spec: TensorSpec) -> Converter:
    """``np.asarray(to_numpy(x)).astype(dtype)`` after the shape check."""
    shape = tuple(spec.shape)
    dtype = spec.numpy_dtype
    # A numpy scalar of exactly the spec dtype needs no cast, only np.array's copy.
    scalar_type = dtype.type if shape == () and np.dtype(dtype.type) == dtype else None

    def convert(value: Any) -> np.ndarray:
        value_type = type(value)
        if value_type is np.ndarray:
            if value.shape != shape:
                raise _Fallback
            converted: np.ndarray = value.astype(dtype)
            return converted
        if value_type is scalar_type:
            return np.array(value)
        if nest.is_nested(value):
            raise _Fallback
        array = np.asarray(to_numpy(value))
        if array.shape != shape:
            raise _Fallback
        return array.astype(dtype)

    return convert


def compile_zeros(spec: Any) -> Optional[Callable[[], Any]]:
    """Compiles ``nest.map_structure(lambda s: s.numpy_zeros(()), spec)``."""
    def zeros(leaf: TensorSpec) -> Optional[Converter]:
        if type(leaf) not in (TensorSpec, BoundedTensorSpec):
            return None
        shape, dtype = tuple(leaf.shape), leaf.numpy_dtype
        return lambda _: np.zeros(shape, dtype=dtype)

    # A conversion of the spec itself, whose leaves it ignores.
    convert = compile_structure(spec, zeros)
    return None if convert is None else lambda: convert(spec)


def compile_gym_action(space: spaces.Space[Any]) -> Converter:
    """Compiles ``AlfGymWrapper._to_gym_action(space, action)``."""
    if isinstance(space, spaces.Dict):
        children = [(k, compile_gym_action(s)) for k, s in space.spaces.items()]
        return lambda action: {k: child(action[k]) for k, child in children}
    if isinstance(space, spaces.Tuple):
        converters = [compile_gym_action(s) for s in space.spaces]
        return lambda action: tuple(child(a) for child, a in zip(converters, action))
    dtype = space.dtype
    if isinstance(space, spaces.Discrete):
        assert dtype is not None  # a Discrete space always has one
        scalar_type = dtype.type

        def to_scalar(action: Any) -> Any:
            if type(action) is scalar_type:
                return action
            if type(action) is np.ndarray and action.dtype is dtype and action.ndim == 0:
                return action[()]
            return np.asarray(action, dtype=dtype).reshape(())[()]

        return to_scalar

    def to_array(action: Any) -> Any:
        if type(action) is np.ndarray and action.dtype is dtype:
            return action  # what np.asarray returns for it
        return np.asarray(action, dtype=dtype)

    return to_array


_NUMERIC_KINDS = "biuf"  # numpy dtype kinds kept in env_info


def info_spec(info: Any) -> Any:
    """The spec nest of the fixed-size numeric entries of an info dict."""
    out: Dict[Any, Any] = {}
    for key, value in info.items():
        if isinstance(value, collections.abc.Mapping):
            sub = info_spec(value)
            if sub:
                out[key] = sub
            continue
        try:
            array = np.asarray(to_numpy(value))
        except (ValueError, TypeError):
            continue  # ragged or not convertible
        if array.dtype.kind in _NUMERIC_KINDS:
            out[key] = TensorSpec.from_array(array)
    return out


def merge_info_specs(first: Dict[Any, Any], second: Dict[Any, Any]) -> Dict[Any, Any]:
    """``first`` updated with ``second``, nested dicts of specs merged key by key."""
    merged = dict(first)
    for key, spec in second.items():
        if isinstance(spec, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_info_specs(merged[key], spec)
        else:
            merged[key] = spec
    return merged


def spec_array(spec: TensorSpec, leaf: Any, field: str, expected: str = "") -> np.ndarray:
    """``leaf`` as an array of ``spec``'s dtype; ``ValueError`` naming ``field`` if its shape
    is not ``spec``'s (``expected`` adds to what the message says was expected)."""
    array = np.asarray(to_numpy(leaf))
    if array.shape != tuple(spec.shape):
        raise ValueError(f"{field}: expected shape {tuple(spec.shape)}{expected}, got shape "
                         f"{array.shape}")
    return array.astype(spec.numpy_dtype)


def fetch_info(spec: Any, info: Any, path: str) -> Any:
    """The entries of ``info`` selected by the dict of specs ``spec``."""
    if isinstance(spec, TensorSpec):
        if info is None:
            return spec.numpy_zeros()
        return spec_array(spec, info, field_name("env_info", path), " (fixed by env_info_spec)")
    if not isinstance(info, collections.abc.Mapping):
        info = {}
    return type(spec)((key, fetch_info(spec[key], info.get(key), join_path(path, key)))
                      for key in sorted(spec))


def compile_info(spec: Any) -> Optional[Converter]:
    """Compiles ``fetch_info(spec, info, path)``; ``None`` if not compilable."""
    if isinstance(spec, TensorSpec):
        shape, dtype = tuple(spec.shape), spec.numpy_dtype
        # Scalars that ``np.array(x, dtype)`` converts exactly as the general path: the
        # dtype's own scalar type (MuJoCo's numpy float64s), Python floats and bools
        # (ints are left to the general path, which decides what a huge one does).
        direct: Tuple[type, ...] = ()
        if shape == ():
            direct = (dtype.type,) + ((float,) if dtype.kind == "f" else ()) + (
                (bool,) if dtype.kind == "b" else ())

        def fetch_leaf(info: Any) -> Any:
            if type(info) in direct:
                return np.array(info, dtype)
            if info is None:
                return spec.numpy_zeros()
            array = np.asarray(to_numpy(info))
            if array.shape != shape:
                raise _Fallback  # the general path raises the shape error
            return array.astype(dtype)

        return fetch_leaf
    keys = _sorted_keys(spec) if type(spec) is dict else None
    children = None if keys is None else _compile_all(lambda k: compile_info(spec[k]), keys)
    if keys is None or children is None:
        return None
    if not keys:
        return lambda info: {}  # an empty spec selects nothing from any info
    pairs = list(zip(keys, children))

    def fetch_dict(info: Any) -> Any:
        if info is None:
            info = {}  # not a Mapping: every entry is missing
        elif type(info) not in _FAST_MAPPINGS:
            raise _Fallback
        get = info.get
        return {k: child(get(k)) for k, child in pairs}

    return fetch_dict


def compile_raw_info(spec: Any) -> Optional[Callable[[Any], Optional[List[Any]]]]:
    """The info entries as the env gave them, for ``AlfGymWrapper``'s flat step: for a flat
    dict of 0-d float and bool specs, Python or numpy floats (a float32 as the Python float
    it converts to and from exactly) and Python bools, which the rows store exactly as
    ``_env_info`` converts them; the function gives ``None`` for any other info."""
    keys = _sorted_keys(spec) if type(spec) is dict and spec else None
    if keys is None:
        return None
    allowed: List[Tuple[Any, Tuple[type, ...]]] = []
    for key in keys:
        leaf = spec[key]
        if nest.is_nested(leaf) or tuple(leaf.shape) != ():
            return None
        dtype = leaf.numpy_dtype
        if dtype.kind == "f" and dtype.itemsize in (4, 8):
            allowed.append((key, (float, np.float64, np.float32)))
        elif dtype.kind == "b":
            allowed.append((key, (bool,)))
        else:
            return None

    def raw(info: Any) -> Optional[List[Any]]:
        if type(info) is not dict:
            return None
        leaves = []
        for key, types in allowed:
            value: Any = info.get(key)
            kind = type(value)
            if kind not in types:
                return None
            leaves.append(float(value) if kind is np.float32 else value)
        return leaves

    return raw
