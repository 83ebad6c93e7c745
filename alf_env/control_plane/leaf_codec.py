"""Fixed-size leaves as one packed record: the pipe path's steps without pickled arrays.

``ParallelAlfEnvironment`` (the pipe path) moves an action to each worker and a
time step back every step. Both have a fixed layout, known from the specs on
both sides of the pipe, so they travel as one ``bytes`` record each
(``MessageType.STEP_PACKED`` / ``RESET_PACKED``) instead of pickled lists of
numpy arrays: pickling an array costs several microseconds (``multiprocessing``
builds a new ``ForkingPickler`` for every message), packing a record well
under one.

A :class:`LeafCodec` is built from a list of ``(shape, dtype)``: the record is
the leaves' bytes one after the other (a packed numpy structured dtype with a
field ``f<i>`` per leaf). Leaves are checked before they are encoded (by the
worker's spec guard, or the parent's action checker), so encoding only casts
what the checker accepted.

The copy into the record is numpy's (:func:`copy_exact`): the native row copy
of the shared-memory path belongs to the data plane, above this one.
"""

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from alf_env import nest
from alf_env.nest_compiled import compile_nest

#: ``(shape, numpy dtype)`` of one leaf.
LeafLayout = Tuple[Tuple[int, ...], np.dtype]


def copy_exact(views: Sequence[np.ndarray], leaves: Sequence[Any],
               scalars: bool = False) -> int:
    """Copies the leading leaves that need no conversion into their views; returns
    how many it copied (the caller converts and checks the rest).

    A leaf needs none if it is an ``np.ndarray`` of exactly its view's dtype
    and shape; with ``scalars``, also (for a 0-d view) a Python bool for a
    bool view, a Python float or numpy float64 for a float64 or float32 view
    (rounded as numpy rounds), or a numpy scalar of exactly the view's dtype.
    """
    for i, (view, leaf) in enumerate(zip(views, leaves)):
        if type(leaf) is np.ndarray:
            if leaf.dtype != view.dtype or leaf.shape != view.shape:
                return i
        elif not scalars or view.ndim != 0 or not _exact_scalar(leaf, view.dtype):
            return i
        view[...] = leaf
    return min(len(views), len(leaves))


def _exact_scalar(leaf: Any, dtype: np.dtype) -> bool:
    if type(leaf) is bool:
        return dtype == np.bool_
    if isinstance(leaf, float):  # numpy's float64 scalars included
        return dtype == np.float64 or dtype == np.float32
    return isinstance(leaf, np.generic) and leaf.dtype == dtype


def leaf_layouts(spec: Any, rows: int = 0) -> List[LeafLayout]:
    """The ``(shape, dtype)`` of each leaf of a nest of ``TensorSpec``.

    Args:
        spec: a nest of specs (with ``.shape`` and ``.numpy_dtype``).
        rows: a leading batch dimension to add (0: none).
    """
    prefix = (rows,) if rows else ()
    return [(prefix + tuple(s.shape), np.dtype(s.numpy_dtype)) for s in nest.flatten(spec)]


class LeafCodec:
    """Moves a list of fixed-size leaves in and out of one packed record.

    Args:
        layouts: ``(shape, dtype)`` of each leaf, in order.
        batched: the layouts have a leading batch dimension (a batched env's
            leaves); :meth:`decode_rows` then concatenates records row after
            row instead of stacking them.
    """

    def __init__(self, layouts: Sequence[LeafLayout], batched: bool = False) -> None:
        self.batched = batched
        self.layouts = [(tuple(shape), np.dtype(dtype)) for shape, dtype in layouts]
        self.dtype = np.dtype([(f"f{i}", (dtype, shape))
                               for i, (shape, dtype) in enumerate(self.layouts)])
        self.names = list(self.dtype.names or ())
        self._buffer = bytearray(self.dtype.itemsize)
        self._views = []
        offset = 0
        for shape, dtype in self.layouts:
            count = int(np.prod(shape, dtype=np.int64))
            self._views.append(np.frombuffer(self._buffer, dtype, count, offset).reshape(shape))
            offset += count * dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of one record."""
        return self.dtype.itemsize

    def encode(self, leaves: Sequence[Any]) -> bytes:
        """One record from checked leaves (cast to the layout's dtypes as needed).

        Raises:
            ValueError: wrong number of leaves, or a leaf that does not fit.
        """
        if len(leaves) != len(self._views):
            raise ValueError(f"expected {len(self._views)} leaves, got {len(leaves)}")
        done = copy_exact(self._views, leaves)  # exact arrays: no conversion
        for view, leaf in zip(self._views[done:], leaves[done:]):
            view[...] = leaf
        return bytes(self._buffer)

    def encode_exact(self, leaves: Sequence[Any], scalars: bool = False) -> Optional[bytes]:
        """One record if every leaf is an array of exactly its layout's shape and
        dtype (nothing to check or cast), else ``None``.

        With ``scalars``, a Python float or numpy float64 for a 0-d float
        layout and a Python bool for a 0-d bool one count as exact too (they
        are stored as numpy converts them; see :func:`copy_exact`).
        """
        if len(leaves) != len(self._views) or copy_exact(self._views, leaves,
                                                         scalars) != len(self._views):
            return None
        return bytes(self._buffer)

    def decode(self, record: bytes) -> List[np.ndarray]:
        """The leaves of one record (writable arrays of their own)."""
        raw = np.frombuffer(bytearray(record), self.dtype)
        return [raw[name].reshape(shape) for name, (shape, _) in zip(self.names, self.layouts)]

    def encode_rows(self, leaves: Sequence[Any], n: int) -> List[bytes]:
        """Records ``0..n-1`` from batched leaves (leaf ``k`` has ``n`` rows of layout ``k``)."""
        records = np.empty(n, self.dtype)
        for name, leaf, (shape, _) in zip(self.names, leaves, self.layouts):
            records[name] = np.asarray(leaf).reshape((n,) + shape)
        return [records[i].tobytes() for i in range(n)]

    def decode_rows(self, records: Sequence[bytes]) -> List[np.ndarray]:
        """Batched leaves from records: leaf ``k`` gets shape ``(n, *shape_k)``,
        or ``(n * b, ...)`` when the layout has a leading batch dimension ``b``
        (the records of batched envs are concatenated, row after row)."""
        raw = np.frombuffer(b"".join(records), self.dtype)
        out = []
        for name, (shape, _) in zip(self.names, self.layouts):
            leaf = np.ascontiguousarray(raw[name])
            out.append(leaf.reshape((-1,) + shape[1:]) if self.batched else leaf)
        return out


# Leaves that pack_action turns into 0-d arrays (see there).
_SCALARS = (np.generic, bool, int, float)


class StepCodecs:
    """The packed action and time step of one env (both sides of its pipe).

    Args:
        action_spec: the env's action spec.
        time_step_spec: the env's time step spec.
        rows: the env's batch size (0: unbatched).
    """

    def __init__(self, action_spec: Any, time_step_spec: Any, rows: int = 0) -> None:
        self.action_spec = action_spec
        self.time_step_spec = time_step_spec
        self.action = LeafCodec(leaf_layouts(action_spec, rows), batched=rows > 0)
        self.time_step = LeafCodec(leaf_layouts(time_step_spec, rows), batched=rows > 0)
        self._flatten_action, self._pack_action = compile_nest(action_spec)
        self.flatten_time_step, self._pack_time_step = compile_nest(time_step_spec)

    def pack_action(self, action: Any) -> Optional[bytes]:
        """The record of ``action`` if it has the spec's structure and every leaf is
        an array of exactly the spec's shape and dtype, else ``None`` (then the
        worker checks it the slow way, and names what is wrong).

        A scalar leaf -- a numpy scalar such as ``np.int64(1)``, or a Python
        ``bool``/``int``/``float`` -- counts as the 0-d array ``np.asarray``
        makes of it (``1`` is int64, ``1.0`` float64), so it is exact only
        where the spec has that dtype and shape ``()``.
        """
        if nest.is_nested(self.action_spec):
            try:
                nest.assert_same_structure(action, self.action_spec)
            except (ValueError, TypeError):
                return None
        leaves = self._flatten_action(action)
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, _SCALARS):
                try:
                    leaves[i] = np.asarray(leaf)
                except OverflowError:  # an int beyond int64: the worker names it
                    return None
        return self.action.encode_exact(leaves)

    def unpack_action(self, record: bytes) -> Any:
        """The action nest of a record."""
        return self._pack_action(self.action.decode(record))

    def unpack_time_step(self, record: bytes) -> Any:
        """The time step of a record (a ``TimeStep`` of numpy arrays)."""
        return self._pack_time_step(self.time_step.decode(record))

    def unpack_time_steps(self, records: Sequence[bytes]) -> Tuple[Any, List[np.ndarray]]:
        """The batched time step of several envs' records, and its leaves
        (see :meth:`LeafCodec.decode_rows`)."""
        leaves = self.time_step.decode_rows(records)
        return self._pack_time_step(leaves), leaves
