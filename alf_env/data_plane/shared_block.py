"""Shared-memory blocks, the Python face of the native engine ``alf_env._penv``: one
anonymous region with a control block and numpy arrays of rows (docs/shared_memory.rst)."""

from __future__ import annotations

import os
from multiprocessing import reduction
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from alf_env import _penv
from alf_env._penv import Controller, JobStatus, JobType, SharedRegion, WaitStatus, WorkerPort

__all__ = ["SharedBlock", "FieldSpec", "Controller", "WorkerPort", "JobType", "JobStatus",
           "WaitStatus", "SPIN_ADAPTIVE", "copy_leaves"]

#: ``spin_us`` value selecting the adaptive spin policy (the default).
SPIN_ADAPTIVE: int = _penv.SPIN_ADAPTIVE

#: ``copy_leaves(dst, src, scalars=False) -> int``: copies the leading ``src[i]`` that need no
#: conversion into row views ``dst[i]`` in one native call; returns how many it copied.
copy_leaves = _penv._copy_leaves

#: A field: ``(name, shape of one row, numpy dtype)``.
FieldSpec = Tuple[str, Tuple[int, ...], np.dtype]


def _normalize_fields(fields: Iterable[Sequence[Any]]) -> Tuple[FieldSpec, ...]:
    """Validates fields and returns them as ``(str, tuple of int, np.dtype)``."""
    result = []
    seen = set()
    for index, field in enumerate(fields):
        try:
            name, shape, dtype = field
        except (TypeError, ValueError):
            raise ValueError(f"field {index}: expected a (name, shape, dtype) triple, got "
                             f"{field!r}") from None
        if not isinstance(name, str) or not name:
            raise ValueError(f"field {index}: expected a non-empty str name, got {name!r}")
        if name in seen:
            raise ValueError(f"field {name!r} is listed twice; field names must be unique")
        seen.add(name)
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        try:
            shape = tuple(int(dim) for dim in shape)
        except TypeError:
            raise ValueError(
                f"field {name!r}: expected a shape (tuple of ints), got {shape!r}") from None
        if any(dim < 0 for dim in shape):
            raise ValueError(f"field {name!r}: expected non-negative dimensions, got {shape}")
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            raise ValueError(f"field {name!r}: dtype {dtype} holds Python object references, "
                             f"which cannot be shared between processes; use a numeric dtype")
        result.append((name, shape, dtype))
    return tuple(result)


def _c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    strides = []
    step = itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


class SharedBlock:
    """A shared-memory region with a control block and one array per field.

    Args:
        fields: ``(name, shape, dtype)`` per field; ``shape`` is one row's.
        num_rows: rows per field (e.g. the number of envs).
        num_workers: worker processes (job slots) of the control block.

    Raises:
        ValueError: malformed fields, ``num_rows < 0`` or ``num_workers`` out of range.
        OSError: the kernel refused the memory.
    """

    def __init__(self, fields: Iterable[Sequence[Any]], num_rows: int, num_workers: int) -> None:
        self._setup(_normalize_fields(fields), num_rows, num_workers, region=None)

    def _setup(self, fields: Tuple[FieldSpec, ...], num_rows: int,
               num_workers: int, region: Optional[SharedRegion]) -> None:
        if int(num_rows) < 0:
            raise ValueError(f"num_rows must be >= 0, got {num_rows}")
        self.fields = fields
        self.num_rows = int(num_rows)
        self.num_workers = int(num_workers)
        self.layout: _penv.Layout = _penv.compute_layout(self.num_workers, self.num_rows, [
            int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for _, shape, dtype in fields])
        if region is None:
            region = SharedRegion(self.layout.total_size)
        elif region.size != self.layout.total_size:
            raise ValueError(f"the shared region has {region.size} bytes but the fields need "
                             f"{self.layout.total_size}; attach with the creator's fields, "
                             f"num_rows and num_workers")
        self._region: Optional[SharedRegion] = region
        buffer = memoryview(region)
        views = {
            name: np.ndarray(shape=(self.num_rows, *shape), dtype=dtype, buffer=buffer,
                             offset=field.offset,
                             strides=(field.row_stride, *_c_strides(shape, dtype.itemsize)))
            for (name, shape, dtype), field in zip(fields, self.layout.fields)}
        self._views: Optional[Mapping[str, np.ndarray]] = MappingProxyType(views)

    @property
    def region(self) -> SharedRegion:
        """The underlying :class:`alf_env._penv.SharedRegion`."""
        return self._check_open()

    @property
    def fd(self) -> int:
        """The region's memfd (owned by the block; do not close it)."""
        return self.region.fd

    @property
    def size(self) -> int:
        """Bytes of the whole region."""
        return self.layout.total_size

    @property
    def views(self) -> Mapping[str, np.ndarray]:
        """Field name -> its numpy view (read-only mapping)."""
        self._check_open()
        assert self._views is not None  # set with the region
        return self._views

    def __getitem__(self, name: str) -> np.ndarray:
        """The numpy view ``(num_rows, *shape)`` of field ``name``."""
        views = self.views
        try:
            return views[name]
        except KeyError:
            raise KeyError(f"no field {name!r}; the fields are {sorted(views)}") from None

    def __contains__(self, name: object) -> bool:
        return self._views is not None and name in self._views

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._region is None

    def _check_open(self) -> SharedRegion:
        if self._region is None:
            raise ValueError("the SharedBlock is closed")
        return self._region

    def controller(self, spin_us: int = SPIN_ADAPTIVE, workers_spread: bool = False) -> Controller:
        """Initialises the control block and returns the main process's side; call once,
        before workers attach. ``spin_us``: ``-1`` adaptive, ``0`` never spin, ``> 0`` that
        many µs; ``workers_spread``: the workers are spread one per CPU (pinned, or in
        lockstep), so the adaptive policy may spin longer (csrc/futex.h)."""
        return Controller(self.region, self.num_workers, spin_us, workers_spread)

    def worker_port(self, index: int, spin_us: int = SPIN_ADAPTIVE,
                    workers_spread: bool = False) -> WorkerPort:
        """The worker's side of job slot ``index`` (the arguments as for :meth:`controller`)."""
        return WorkerPort(self.region, self.num_workers, index, spin_us, workers_spread)

    def close(self) -> None:
        """Drops this block's references to the region (idempotent)."""
        self._views = None
        self._region = None

    def __enter__(self) -> "SharedBlock":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickles as a duplicate of the memfd plus the layout arguments."""
        region = self._check_open()
        return (_rebuild_shared_block, (reduction.DupFd(region.fd), self.fields, self.num_rows,
                                        self.num_workers, self.layout.total_size))

    def __repr__(self) -> str:
        state = "closed" if self._region is None else f"fd={self._region.fd}"
        names = ", ".join(name for name, _, _ in self.fields)
        return (f"SharedBlock({state}, size={self.layout.total_size}, num_rows={self.num_rows}, "
                f"num_workers={self.num_workers}, fields=[{names}])")


def _rebuild_shared_block(dup_fd: Any, fields: Tuple[FieldSpec, ...],
                          num_rows: int, num_workers: int,
                          size: int) -> SharedBlock:
    """Unpickles a :class:`SharedBlock`: attaches to the received memfd."""
    fd = dup_fd.detach()
    try:
        block = SharedBlock.__new__(SharedBlock)
        block._setup(fields, num_rows, num_workers, region=SharedRegion.attach(fd, size))
        return block
    finally:
        os.close(fd)  # attach() keeps its own duplicate
