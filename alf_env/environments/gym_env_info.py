"""The ``env_info`` of ``AlfGymWrapper``: the fixed-size numeric entries of info dicts.

The spec of the numeric entries of gymnasium info dicts (found by the
wrapper's probe), and the fetch of exactly those entries from each info dict,
in a general form and compiled (see :mod:`alf_env.environments.gym_conversions`).
The rule itself is described in :mod:`alf_env.environments.alf_gym_wrapper`.
"""

import collections.abc
from typing import Any, Dict, Optional

import numpy as np

from alf_env.environments.gym_conversions import (
    _FAST_MAPPINGS,
    _Converter,
    _Fallback,
    _field,
    _to_numpy,
)
from alf_env.nest_paths import _join
from alf_env.tensor_specs import TensorSpec

_NUMERIC_KINDS = "biuf"  # numpy dtype kinds kept in env_info


def _info_spec(info: Any) -> Any:
    """The spec nest of the fixed-size numeric entries of an info dict."""
    out: Dict[Any, Any] = {}
    for key, value in info.items():
        if isinstance(value, collections.abc.Mapping):
            sub = _info_spec(value)
            if sub:
                out[key] = sub
            continue
        try:
            array = np.asarray(_to_numpy(value))
        except (ValueError, TypeError):
            continue  # ragged or not convertible
        if array.dtype.kind not in _NUMERIC_KINDS:
            continue
        out[key] = TensorSpec.from_array(array)
    return out


def _merge_info_specs(first: Dict[Any, Any], second: Dict[Any, Any]) -> Dict[Any, Any]:
    merged = dict(first)
    for key, spec in second.items():
        if isinstance(spec, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_info_specs(merged[key], spec)
        else:
            merged[key] = spec
    return merged


def _fetch_info(spec: Any, info: Any, path: str) -> Any:
    """The entries of ``info`` selected by the dict of specs ``spec``."""
    if isinstance(spec, TensorSpec):
        if info is None:
            return spec.numpy_zeros()
        array = np.asarray(_to_numpy(info))
        if array.shape != tuple(spec.shape):
            raise ValueError(
                f"{_field('env_info', path)}: expected shape {tuple(spec.shape)} "
                f"(fixed by env_info_spec), got shape {array.shape}")
        return array.astype(spec.numpy_dtype)
    if not isinstance(info, collections.abc.Mapping):
        info = {}
    return type(spec)((key, _fetch_info(spec[key], info.get(key), _join(path, key)))
                      for key in sorted(spec))


def _compile_info(spec: Any) -> Optional[_Converter]:
    """Compiles ``_fetch_info(spec, info, path)``; ``None`` if not compilable."""
    if isinstance(spec, TensorSpec):
        shape, dtype = tuple(spec.shape), spec.numpy_dtype
        # Scalars that become exactly ``np.asarray(x).astype(dtype)`` with
        # one ``np.array(x, dtype)``: the spec dtype's own numpy scalar type
        # (MuJoCo's infos are numpy float64s), and Python floats and bools
        # for float and bool specs (one rounding either way; ints are left to
        # the general code, which decides what a huge one does).
        direct: tuple = ()
        if shape == ():
            direct = (dtype.type,) + ((float,) if dtype.kind == "f" else ()) + (
                (bool,) if dtype.kind == "b" else ())

        def fetch_leaf(info: Any) -> Any:
            if type(info) in direct:
                return np.array(info, dtype)
            if info is None:
                return spec.numpy_zeros()
            array = np.asarray(_to_numpy(info))
            if array.shape != shape:
                raise _Fallback  # the general path raises the shape error
            return array.astype(dtype)

        return fetch_leaf
    if type(spec) is not dict:
        return None
    try:
        keys = sorted(spec)
    except TypeError:
        return None
    compiled = [_compile_info(spec[k]) for k in keys]
    children = [child for child in compiled if child is not None]
    if len(children) != len(compiled):
        return None
    if not keys:
        return _no_info  # an empty spec selects nothing from any info
    pairs = list(zip(keys, children))

    def fetch_dict(info: Any) -> Any:
        if info is None:
            info = {}  # not a Mapping: every entry is missing
        elif type(info) not in _FAST_MAPPINGS:
            raise _Fallback
        get = info.get
        return {k: child(get(k)) for k, child in pairs}

    return fetch_dict


def _no_info(info: Any) -> Dict[Any, Any]:
    """``_fetch_info({}, info, path)``: a new empty dict."""
    return {}
