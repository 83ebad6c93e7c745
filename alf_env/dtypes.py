"""Conversions between torch and numpy dtypes, for the specs.

Dtypes may be given as ``torch.dtype``, ``numpy.dtype``, numpy scalar types
(``np.uint8``) or strings (``"float32"``, ``"torch.int64"``);
:func:`as_torch_dtype` turns any of them into the ``torch.dtype`` that specs
store, :func:`torch_dtype_to_numpy` and :func:`numpy_dtype_to_torch` map
between the two libraries. :mod:`alf_env.tensor_specs` re-exports them.
"""

from typing import Any, Union

import numpy as np
import torch

__all__ = [
    "DTypeLike",
    "torch_dtype_to_numpy",
    "torch_dtype_to_str",
    "numpy_dtype_to_torch",
    "as_torch_dtype",
    "TORCH_TO_NUMPY",
    "to_numpy",
]

DTypeLike = Union[torch.dtype, np.dtype, type, str]

#: The numpy dtype of each torch dtype that has one.
TORCH_TO_NUMPY = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}
for _name, _np_type in (("uint16", np.uint16), ("uint32", np.uint32),
                        ("uint64", np.uint64)):
    if hasattr(torch, _name):
        TORCH_TO_NUMPY[getattr(torch, _name)] = np.dtype(_np_type)
_NUMPY_TO_TORCH = {v: k for k, v in TORCH_TO_NUMPY.items()}


def to_numpy(value: Any) -> Any:
    """``value`` as a numpy array if it is a torch tensor, else as is."""
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return value


def torch_dtype_to_numpy(dtype: DTypeLike) -> np.dtype:
    """Returns the numpy dtype equivalent to a torch dtype (or dtype-like).

    Raises:
        TypeError: if the dtype has no numpy equivalent (e.g. bfloat16).
    """
    # A torch dtype (the common case) is its own as_torch_dtype: look it up
    # directly.
    np_dtype = TORCH_TO_NUMPY.get(dtype) if type(dtype) is torch.dtype else None
    if np_dtype is not None:
        return np_dtype
    dtype = as_torch_dtype(dtype)
    try:
        return TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} has no numpy equivalent; "
                        f"expected one of {sorted(map(str, TORCH_TO_NUMPY))}"
                        ) from None


def torch_dtype_to_str(dtype: DTypeLike) -> str:
    """The name of a dtype without the ``torch.`` prefix, e.g. ``"float32"`` (as ALF's)."""
    return str(as_torch_dtype(dtype))[len("torch."):]


def numpy_dtype_to_torch(dtype: Any) -> torch.dtype:
    """Returns the torch dtype equivalent to a numpy dtype (or dtype-like).

    Raises:
        TypeError: if the dtype has no torch equivalent (e.g. strings, objects).
    """
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{dtype!r} is not a numpy dtype: {e}") from None
    try:
        return _NUMPY_TO_TORCH[np_dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {np_dtype} has no torch equivalent; "
                        f"expected one of {sorted(map(str, _NUMPY_TO_TORCH))}"
                        ) from None


def as_torch_dtype(dtype: DTypeLike) -> torch.dtype:
    """Converts a dtype-like (torch/numpy dtype, numpy type, str) to torch.

    Raises:
        TypeError: if ``dtype`` does not name a dtype known to torch.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        name = dtype[len("torch."):] if dtype.startswith("torch.") else dtype
        candidate = getattr(torch, name, None)
        if isinstance(candidate, torch.dtype):
            return candidate
    return numpy_dtype_to_torch(dtype)
