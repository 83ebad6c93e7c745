"""Conversions between torch and numpy dtypes, for the specs (re-exported by
:mod:`alf_env.tensor_specs`)."""

from typing import Any, Dict, Union

import numpy as np
import torch

__all__ = ["DTypeLike", "torch_dtype_to_numpy", "torch_dtype_to_str", "numpy_dtype_to_torch",
           "as_torch_dtype", "TORCH_TO_NUMPY", "to_numpy"]

DTypeLike = Union[torch.dtype, np.dtype, type, str]

# torch's uint16, uint32 and uint64 are recent.
TORCH_TO_NUMPY: Dict[torch.dtype, np.dtype] = {getattr(torch, name): np.dtype(name) for name in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
    "complex64", "complex128", "uint16", "uint32", "uint64") if hasattr(torch, name)}
_NUMPY_TO_TORCH = {v: k for k, v in TORCH_TO_NUMPY.items()}


def to_numpy(value: Any) -> Any:
    """``value`` as a numpy array if it is a torch tensor, else as is."""
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return value


def torch_dtype_to_numpy(dtype: DTypeLike) -> np.dtype:
    """The numpy dtype equivalent to a torch dtype (or dtype-like); ``TypeError`` if none."""
    # A torch dtype (the common case) is its own as_torch_dtype.
    np_dtype = TORCH_TO_NUMPY.get(dtype) if type(dtype) is torch.dtype else None
    if np_dtype is not None:
        return np_dtype
    dtype = as_torch_dtype(dtype)
    try:
        return TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} has no numpy equivalent; "
                        f"expected one of {sorted(map(str, TORCH_TO_NUMPY))}") from None


def torch_dtype_to_str(dtype: DTypeLike) -> str:
    """The name of a dtype without the ``torch.`` prefix, e.g. ``"float32"`` (as ALF's)."""
    return str(as_torch_dtype(dtype))[len("torch."):]


def numpy_dtype_to_torch(dtype: Any) -> torch.dtype:
    """The torch dtype equivalent to a numpy dtype (or dtype-like); ``TypeError`` if none."""
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{dtype!r} is not a numpy dtype: {e}") from None
    try:
        return _NUMPY_TO_TORCH[np_dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {np_dtype} has no torch equivalent; "
                        f"expected one of {sorted(map(str, _NUMPY_TO_TORCH))}") from None


def as_torch_dtype(dtype: DTypeLike) -> torch.dtype:
    """A dtype-like (torch/numpy dtype, numpy type, str) as torch's; ``TypeError`` if none."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        name = dtype[len("torch."):] if dtype.startswith("torch.") else dtype
        candidate = getattr(torch, name, None)
        if isinstance(candidate, torch.dtype):
            return candidate
    return numpy_dtype_to_torch(dtype)
