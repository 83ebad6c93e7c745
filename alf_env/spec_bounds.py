"""The element-wise bounds of a ``BoundedTensorSpec``: defaults, checks, ``repr``, and
sampling inside them, for :mod:`alf_env.tensor_specs`."""

from typing import Any, Tuple

import numpy as np
import torch

from alf_env.dtypes import to_numpy

# Exclusive upper limit of the seed ``BoundedTensorSpec.sample()`` draws from torch's RNG.
TORCH_SEED_LIMIT = 2**62


def default_bound(dtype: torch.dtype, np_dtype: np.dtype, upper: bool) -> Any:
    """Default bound: the dtype range for ints/bool, ALF's [0, 1] for floats."""
    if dtype == torch.bool:
        return upper
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        return info.max if upper else info.min
    return 1.0 if upper else 0.0


def bound_array(value: Any, name: str, shape: torch.Size, np_dtype: np.dtype) -> np.ndarray:
    """A bound as a read-only array of ``np_dtype`` that broadcasts to ``shape``; it keeps its
    own shape, as in ALF, so ``replace(shape=...)`` keeps bounds that still broadcast."""
    value = to_numpy(value)
    raw = np.asarray(value)
    if raw.dtype == object:
        raise TypeError(f"{name} must be numeric, got {value!r}")
    if np.issubdtype(np_dtype, np.integer) or np_dtype == np.bool_:
        if np.issubdtype(raw.dtype, np.floating) and not np.all(np.isfinite(raw)):
            raise ValueError(f"{name} must be finite for dtype {np_dtype}, got {value!r}")
        if np.issubdtype(np_dtype, np.integer):
            info = np.iinfo(np_dtype)
            as_obj = raw.astype(object) if raw.dtype.kind in "iub" else raw
            if np.any(as_obj < info.min) or np.any(as_obj > info.max):
                raise ValueError(f"{name}={value!r} is outside the range of dtype {np_dtype} "
                                 f"[{info.min}, {info.max}]")
    elif np.any(np.isnan(raw.astype(np.float64, copy=False))):
        raise ValueError(f"{name} must not be NaN, got {value!r}")
    try:
        np.broadcast_to(raw, tuple(shape))
    except ValueError:
        raise ValueError(f"{name} with shape {raw.shape} cannot be broadcast to the "
                         f"spec shape {tuple(shape)}") from None
    arr = np.array(raw.astype(np_dtype))  # a copy: the caller's array may change
    arr.setflags(write=False)
    return arr


def compact_bound(bound: np.ndarray) -> str:
    """Shows a bound as a scalar when it is uniform."""
    if bound.size > 0 and np.all(bound == bound.flat[0]):
        return str(bound.flat[0])
    return np.array2string(bound, separator=", ")


def sample_int(rng: Any, low: np.ndarray, high: np.ndarray, shape: Tuple[int, ...],
               np_dtype: np.dtype) -> np.ndarray:
    """Uniform integers in the inclusive range ``[low, high]``."""
    out_dtype = np.dtype(np.int64) if np_dtype == np.bool_ else np_dtype
    # C order matters: RandomState.randint misreads non-C-ordered object arrays.
    low = np.ascontiguousarray(low, dtype=out_dtype)
    high = np.ascontiguousarray(high, dtype=out_dtype)
    if hasattr(rng, "integers"):  # numpy.random.Generator
        values = rng.integers(low, high, size=shape, dtype=out_dtype, endpoint=True)
    else:
        # RandomState's upper bound is exclusive; Python ints avoid overflow
        # of ``high + 1`` at the dtype's maximum.
        values = rng.randint(low.astype(object), high.astype(object) + 1,
                             size=shape, dtype=out_dtype)
    return np.asarray(values).astype(np_dtype, copy=False)


def sample_float(rng: Any, low: np.ndarray, high: np.ndarray, shape: Tuple[int, ...],
                 np_dtype: np.dtype) -> np.ndarray:
    """Finite floats inside ``[low, high]`` (uniform when both are finite)."""
    low = low.astype(np.float64)
    high = high.astype(np.float64)
    low_finite = np.isfinite(low)
    high_finite = np.isfinite(high)
    u = rng.uniform(0.0, 1.0, size=shape)
    # (1-u)*low + u*high never overflows for finite bounds.
    with np.errstate(invalid="ignore", over="ignore"):
        values = (1.0 - u) * low + u * high
    if not (np.all(low_finite) and np.all(high_finite)):
        normal = rng.standard_normal(size=shape)
        tail = np.abs(normal)
        values = np.where(low_finite & ~high_finite, low + tail, values)
        values = np.where(~low_finite & high_finite, high - tail, values)
        values = np.where(~low_finite & ~high_finite, normal, values)
    info = np.finfo(np_dtype)
    values = np.clip(values, np.maximum(low, float(info.min)), np.minimum(high, float(info.max)))
    return np.asarray(values).astype(np_dtype)
