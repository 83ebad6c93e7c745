"""Specs describing tensors (and numpy arrays) before they exist: ALF's ``TensorSpec`` and
``BoundedTensorSpec`` (docs/contract.rst, "Data model"; docs/migration.rst for the details).

Dtypes are stored as ``torch.dtype`` (:mod:`alf_env.dtypes`, re-exported here); the bounds'
checks and sampling are :mod:`alf_env.spec_bounds`.
"""

from typing import Any, Iterable, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from alf_env.dtypes import (
    TORCH_TO_NUMPY,
    DTypeLike,
    as_torch_dtype,
    numpy_dtype_to_torch,
    to_numpy,
    torch_dtype_to_numpy,
    torch_dtype_to_str,
)
from alf_env.spec_bounds import (
    TORCH_SEED_LIMIT,
    bound_array,
    compact_bound,
    default_bound,
    sample_float,
    sample_int,
)

__all__ = ["SpecBoundsError", "TensorSpec", "BoundedTensorSpec", "torch_dtype_to_numpy",
           "torch_dtype_to_str", "numpy_dtype_to_torch", "as_torch_dtype"]

ShapeLike = Union[torch.Size, Sequence[int], int]
OuterDims = Optional[Iterable[int]]


def _as_shape(shape: ShapeLike) -> torch.Size:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape), )
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape must have non-negative dims, got {dims}")
    return torch.Size(dims)


class SpecBoundsError(ValueError, AssertionError):
    """A ``BoundedTensorSpec`` got ``minimum > maximum``; an ``AssertionError`` as in ALF."""


def _full_shape(shape: torch.Size, outer_dims: OuterDims) -> Tuple[int, ...]:
    if outer_dims is None or (type(outer_dims) is tuple and not outer_dims):
        return tuple(shape)
    return tuple(int(d) for d in outer_dims) + tuple(shape)


class TensorSpec:
    """Describes a tensor by its shape (a ``torch.Size``) and dtype (a ``torch.dtype``)."""

    __slots__ = ("_shape", "_dtype")

    def __init__(self, shape: ShapeLike, dtype: DTypeLike = torch.float32) -> None:
        """Creates a spec.

        Args:
            shape: the shape of the described tensor (without batch dims).
            dtype: a torch dtype or anything convertible (numpy dtype, ``"int32"``).

        Raises:
            TypeError: if ``shape`` or ``dtype`` cannot be interpreted.
        """
        self._shape = _as_shape(shape)
        self._dtype = as_torch_dtype(dtype)

    @classmethod
    def from_spec(cls, spec: "TensorSpec") -> "TensorSpec":
        """Returns a ``TensorSpec`` with the shape and dtype of ``spec``."""
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"from_spec expects a TensorSpec, got {type(spec).__name__}")
        return TensorSpec(spec.shape, spec.dtype)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, from_dim: int = 0) -> "TensorSpec":
        """Returns the spec of ``tensor.shape[from_dim:]`` and ``tensor.dtype``."""
        if not torch.is_tensor(tensor):
            raise TypeError(f"from_tensor expects a torch.Tensor, got {type(tensor).__name__}")
        return TensorSpec(tensor.shape[from_dim:], tensor.dtype)

    @classmethod
    def from_array(cls, array: Union[np.ndarray, np.generic, Any],
                   from_dim: int = 0) -> "TensorSpec":
        """Returns the spec of ``np.asarray(array)``'s ``shape[from_dim:]`` and dtype."""
        array = np.asarray(array)
        return TensorSpec(array.shape[from_dim:], array.dtype)

    @property
    def shape(self) -> torch.Size:
        """The shape of the described tensor."""
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of the described tensor."""
        return self._dtype

    @property
    def ndim(self) -> int:
        """The rank of the described tensor."""
        return len(self._shape)

    @property
    def numel(self) -> int:
        """The number of elements of the described tensor."""
        return int(np.prod(tuple(self._shape), dtype=np.int64))

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype equivalent to :attr:`dtype`."""
        np_dtype = TORCH_TO_NUMPY.get(self._dtype)
        if np_dtype is None:
            return torch_dtype_to_numpy(self._dtype)  # raises the TypeError
        return np_dtype

    @property
    def dtype_str(self) -> str:
        """The dtype's name without the ``torch.`` prefix, e.g. ``"float32"``."""
        return torch_dtype_to_str(self._dtype)

    @property
    def is_discrete(self) -> bool:
        """Whether the dtype is not floating point (ints and bool)."""
        return not self._dtype.is_floating_point

    @property
    def is_continuous(self) -> bool:
        """Whether the dtype is floating point."""
        return self._dtype.is_floating_point

    @classmethod
    def is_bounded(cls) -> bool:
        """Whether this spec class carries bounds."""
        return False

    def zeros(self, outer_dims: OuterDims = None) -> torch.Tensor:
        """A zero tensor of shape ``outer_dims + shape``."""
        return torch.zeros(_full_shape(self._shape, outer_dims), dtype=self._dtype)

    def ones(self, outer_dims: OuterDims = None) -> torch.Tensor:
        """An all-one tensor of shape ``outer_dims + shape``."""
        return torch.ones(_full_shape(self._shape, outer_dims), dtype=self._dtype)

    def constant(self, value: Any, outer_dims: OuterDims = None) -> torch.Tensor:
        """:meth:`numpy_constant` as a tensor."""
        return torch.from_numpy(self.numpy_constant(value, outer_dims))

    def numpy_zeros(self, outer_dims: OuterDims = None) -> np.ndarray:
        """A zero array of shape ``outer_dims + shape``."""
        return np.zeros(_full_shape(self._shape, outer_dims), dtype=self.numpy_dtype)

    def numpy_constant(self, value: Any, outer_dims: OuterDims = None) -> np.ndarray:
        """An array of shape ``outer_dims + shape`` filled with ``value`` (broadcast)."""
        out = np.empty(_full_shape(self._shape, outer_dims), dtype=self.numpy_dtype)
        out[...] = to_numpy(value)
        return out

    def randn(self, outer_dims: OuterDims = None) -> torch.Tensor:
        """A tensor of standard-normal samples (floating dtypes only)."""
        return torch.randn(_full_shape(self._shape, outer_dims), dtype=self._dtype)

    def replace(self, shape: Optional[ShapeLike] = None,
                dtype: Optional[DTypeLike] = None) -> "TensorSpec":
        """A new ``TensorSpec`` with ``shape`` and/or ``dtype`` replaced; ``None`` keeps one."""
        return TensorSpec(self._shape if shape is None else shape,
                          self._dtype if dtype is None else dtype)

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented if not isinstance(other, TensorSpec) else False
        return self._shape == other._shape and self._dtype == other._dtype

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(self._shape), self._dtype))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={tuple(self._shape)}, dtype={self._dtype})"

    def __reduce__(self) -> Tuple[Any, ...]:
        return TensorSpec, (tuple(self._shape), self._dtype)


class BoundedTensorSpec(TensorSpec):
    """A :class:`TensorSpec` with inclusive element-wise bounds.

    Bounds are stored as read-only arrays of the spec's dtype and of the shape they were
    given, as in ALF (docs/migration.rst). Omitted bounds are the dtype's range for
    integers and bool, ``[0, 1]`` for floats; float bounds may be infinite.
    """

    __slots__ = ("_minimum", "_maximum")

    def __init__(self, shape: ShapeLike, dtype: DTypeLike = torch.float32,
                 minimum: Any = None, maximum: Any = None) -> None:
        """Creates a bounded spec.

        Args:
            shape, dtype: as :class:`TensorSpec`.
            minimum: inclusive lower bound(s), broadcastable to ``shape``.
            maximum: inclusive upper bound(s), broadcastable to ``shape``.

        Raises:
            ValueError: if a bound cannot be broadcast to ``shape``, is outside
                the dtype's range or is NaN.
            SpecBoundsError: if ``minimum > maximum`` anywhere (naming the index).
        """
        super().__init__(shape, dtype)
        np_dtype = self.numpy_dtype
        if minimum is None:
            minimum = default_bound(self._dtype, np_dtype, upper=False)
        if maximum is None:
            maximum = default_bound(self._dtype, np_dtype, upper=True)
        self._minimum = bound_array(minimum, "minimum", self._shape, np_dtype)
        self._maximum = bound_array(maximum, "maximum", self._shape, np_dtype)
        bad = self._minimum > self._maximum
        if np.any(bad):
            bad = np.broadcast_to(bad, tuple(self._shape))
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            low = np.broadcast_to(self._minimum, bad.shape)[index].item()
            high = np.broadcast_to(self._maximum, bad.shape)[index].item()
            raise SpecBoundsError(f"minimum must be <= maximum, but at index {index} "
                                  f"minimum={low!r} > maximum={high!r}; pass bounds with "
                                  f"minimum <= maximum")

    @classmethod
    def from_spec(cls, spec: TensorSpec) -> "BoundedTensorSpec":
        """Returns a bounded copy of ``spec`` (default bounds if it has none)."""
        bounds = (spec.minimum, spec.maximum) if isinstance(spec, BoundedTensorSpec) else ()
        plain = TensorSpec.from_spec(spec)  # raises the TypeError of a non-spec
        return BoundedTensorSpec(plain.shape, plain.dtype, *bounds)

    @classmethod
    def is_bounded(cls) -> bool:
        return True

    @property
    def minimum(self) -> np.ndarray:
        """Inclusive lower bounds: a read-only array broadcastable to :attr:`shape`."""
        return self._minimum

    @property
    def maximum(self) -> np.ndarray:
        """Inclusive upper bounds: a read-only array broadcastable to :attr:`shape`."""
        return self._maximum

    def replace(self, shape: Optional[ShapeLike] = None, dtype: Optional[DTypeLike] = None,
                minimum: Any = None, maximum: Any = None) -> "BoundedTensorSpec":
        """A new ``BoundedTensorSpec`` with some fields replaced; ``None`` keeps one (a kept
        bound must broadcast to a new ``shape``)."""
        return BoundedTensorSpec(self._shape if shape is None else shape,
                                 self._dtype if dtype is None else dtype,
                                 self._minimum if minimum is None else minimum,
                                 self._maximum if maximum is None else maximum)

    def numpy_sample(self, outer_dims: OuterDims = None, rng: Any = np.random) -> np.ndarray:
        """Samples an array of shape ``outer_dims + shape`` inside the bounds.

        Integers are uniform over the inclusive range, floats between finite bounds; an
        infinite side is replaced by a half-normal offset, so the values stay finite.

        Args:
            outer_dims: optional leading dims.
            rng: ``numpy.random`` (default), a ``RandomState`` or a ``Generator``.

        Returns:
            An array of the spec's numpy dtype.
        """
        shape = _full_shape(self._shape, outer_dims)
        np_dtype = self.numpy_dtype
        if shape == self._minimum.shape:  # no broadcast views needed
            low, high = self._minimum, self._maximum
        else:
            low = np.broadcast_to(self._minimum, shape)
            high = np.broadcast_to(self._maximum, shape)
        if self.is_continuous:
            return sample_float(rng, low, high, shape, np_dtype)
        return sample_int(rng, low, high, shape, np_dtype)

    def sample(self, outer_dims: OuterDims = None) -> torch.Tensor:
        """Samples a tensor as :meth:`numpy_sample`, from torch's RNG (``torch.manual_seed``)."""
        seed = int(torch.randint(0, TORCH_SEED_LIMIT, (), dtype=torch.int64))
        return torch.from_numpy(self.numpy_sample(outer_dims, np.random.default_rng(seed)))

    def __eq__(self, other: object) -> bool:
        eq = super().__eq__(other)
        if eq is not True or not isinstance(other, BoundedTensorSpec):  # True: of this type
            return eq
        # A scalar bound equals an array bound holding that value everywhere.
        shape = tuple(self._shape)
        return (np.array_equal(np.broadcast_to(self._minimum, shape),
                               np.broadcast_to(other._minimum, shape))
                and np.array_equal(np.broadcast_to(self._maximum, shape),
                                   np.broadcast_to(other._maximum, shape)))

    __hash__ = TensorSpec.__hash__  # defining __eq__ would leave it None

    def __repr__(self) -> str:
        return (f"BoundedTensorSpec(shape={tuple(self._shape)}, dtype={self._dtype}, "
                f"minimum={compact_bound(self._minimum)}, maximum={compact_bound(self._maximum)})")

    def __reduce__(self) -> Tuple[Any, ...]:
        return BoundedTensorSpec, (tuple(self._shape), self._dtype, self._minimum, self._maximum)
