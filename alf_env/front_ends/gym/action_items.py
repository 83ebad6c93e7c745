"""The caller's actions through shared memory, each env receiving exactly its item.

gymnasium's ``AsyncVectorEnv`` pickles each env its item of the batch, so an env
receives what the caller put there (a float64 array for a float32 ``Box``, a numpy
scalar from a ``(n,)`` batch, Python lists from a list of lists). To keep that,
:func:`action_layout`'s array leaves are :class:`ItemNode`: each env's row holds the
**bytes** of its item (up to ``ITEM_BYTES`` per element) and its *kind*
(container, dtype, shape), from which the worker rebuilds the very item. An array
of the space's own dtype and shape (the common case) needs no kind. What is
refused, and how it differs from ``AsyncVectorEnv``: ``docs/migration.rst``
("From gymnasium AsyncVectorEnv").
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from gymnasium import spaces

from alf_env.control_plane.spec_checks import can_cast
from alf_env.front_ends.gym.space_layout import Node, Rows, SpaceLayout

__all__ = ["ItemNode", "ItemRows", "action_layout"]

#: Bytes each element of a space may take in the rows (the widest numeric dtype).
ITEM_BYTES = 8
#: The dtypes an item may have, by index (its place in a kind's code).
ITEM_DTYPES = tuple(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64))
_DTYPE_INDEX = {dtype.str: i for i, dtype in enumerate(ITEM_DTYPES)}

# What held an env's item (a kind's container).
ARRAY, NUMPY_SCALAR, PY_SCALAR, LIST, TUPLE = range(5)
#: The kind code of the space's own item: an ndarray of its dtype and shape (a
#: numpy scalar for a shape-() space), what the fast path writes.
DEFAULT = 0


def _not_iterable(values: Any, n: int) -> TypeError:
    # gymnasium's iterate() words it so; tests match both with one pattern.
    return TypeError(f"Unable to iterate over the following elements: {values} (expected "
                     f"a batch of {n} actions, one per env)")


class ItemRows:
    """One action leaf's rows: the items' bytes, their kinds and typed views of them."""

    def __init__(self, data: np.ndarray, kinds: np.ndarray, shape: Tuple[int, ...],
                 dtype: np.dtype) -> None:
        self.data = data      # (num_rows, ITEM_BYTES * size) uint8
        self.kinds = kinds    # (num_rows, 2 + len(shape)) int64: code, ndim, dims
        self.codes = kinds[:, 0]
        self._typed: Dict[str, np.ndarray] = {}
        self._kinds_seen: Dict[bytes, Tuple[Any, ...]] = {}  # a kind row -> how to rebuild its item
        size = int(np.prod(shape, dtype=np.int64))
        self.default = self.typed(dtype)[:, :size].reshape((len(data),) + tuple(shape))
        # Rows whose kind is not DEFAULT (kept by the writer, the parent).
        self._marked = np.zeros(len(data), np.bool_)
        self._any_marked = False
        self._all_kind: Optional[np.ndarray] = None  # the kind every row holds, if known

    def typed(self, dtype: np.dtype) -> np.ndarray:
        """The rows' bytes seen as ``dtype``: ``(num_rows, elements)``."""
        view = self._typed.get(dtype.str)
        if view is None:
            view = self._typed[dtype.str] = self.data.view(dtype)
        return view

    def __setitem__(self, rows: Rows, batch: np.ndarray) -> None:
        self.default[rows] = batch
        if self._any_marked:
            self._all_kind = None
            self.codes[rows] = DEFAULT
            self._marked[rows] = False
            self._any_marked = bool(self._marked.any())

    def write_items(self, rows: Rows, dtype: np.dtype, flat: np.ndarray, kind: np.ndarray) -> None:
        """Writes items of one kind: ``flat`` is ``(len(rows), elements)`` of ``dtype``."""
        self.typed(dtype)[rows, :flat.shape[1]] = flat
        if kind is self._all_kind:
            return  # every row holds that kind already
        self.kinds[rows] = kind
        whole = isinstance(rows, slice) and rows.indices(len(self.data)) == (0, len(self.data), 1)
        self._all_kind = kind if whole else None
        if kind[0] != DEFAULT:
            self._marked[rows] = True
            self._any_marked = True
        elif self._any_marked:
            self._marked[rows] = False
            self._any_marked = bool(self._marked.any())

    def item(self, row: int) -> Any:
        """Rebuilds the item of ``row`` from its kind (one that is not DEFAULT)."""
        kind = self.kinds[row]
        key = kind.tobytes()
        known = self._kinds_seen.get(key)
        if known is None:
            container, index = divmod(int(kind[0]) - 1, len(ITEM_DTYPES))  # see ItemNode._kind
            dtype = ITEM_DTYPES[index]
            shape = tuple(int(d) for d in kind[2:2 + int(kind[1])])
            known = self._kinds_seen[key] = (container, self.typed(dtype), shape,
                                             int(np.prod(shape, dtype=np.int64)))
        container, typed, shape, size = known
        array = typed[row, :size].reshape(shape)
        if container == ARRAY:
            return array.copy()
        if container == NUMPY_SCALAR:
            return array[()]
        if container == PY_SCALAR:
            return array.item()
        return array.tolist() if container == LIST else tuple(array.tolist())


class _ItemBatch:
    """A checked batch of items not all of the space's kind, for ``SpaceLayout.write_rows``."""

    def __init__(self, groups: List[Tuple[Optional[List[int]], np.dtype, np.ndarray,
                                          np.ndarray]]) -> None:
        self.groups = groups  # (batch positions or None for all, dtype, flat, kind)

    def write(self, rows_view: ItemRows, rows: Rows) -> None:
        ids = None
        for positions, dtype, flat, kind in self.groups:
            if positions is None:
                rows_view.write_items(rows, dtype, flat, kind)
                continue
            if ids is None:
                ids = (np.arange(*rows.indices(len(rows_view.data))) if isinstance(rows, slice)
                       else np.asarray(rows))
            rows_view.write_items(ids[positions], dtype, flat, kind)


class ItemNode(Node):
    """An array leaf of an action space whose rows carry the caller's items: their
    bytes (``ITEM_BYTES`` per element) and kinds (``code, ndim, *dims``)."""

    is_leaf = True

    def __init__(self, path: str, shape: Tuple[int, ...], dtype: np.dtype) -> None:
        super().__init__(path)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.fields = [("", (ITEM_BYTES * max(self.size, 1),), np.dtype(np.uint8)),
                       ("kind", (2 + len(self.shape),), np.dtype(np.int64))]
        self._integer = self.dtype.kind in "biu"
        self._kinds: Dict[Tuple[Any, ...], np.ndarray] = {}
        # (dtype, shape) of batch arrays accepted before whose values need no check.
        self._batches_seen: Dict[Tuple[np.dtype, Tuple[int, ...]], np.ndarray] = {}

    def bind(self, views: List[Any]) -> None:
        views[self.first] = ItemRows(views[self.first], views[self.first + 1], self.shape,
                                     self.dtype)

    def exact_batch_writer(self, views: Sequence[Any], rows: slice,
                           n: int) -> Optional[Callable[[Any], bool]]:
        """See ``SpaceLayout.exact_batch_writer``: ``ItemRows.__setitem__``, with no walk."""
        item_rows: ItemRows = views[self.first]
        dtype, shape = self.dtype, (n,) + self.shape

        def write(values: Any) -> bool:
            if type(values) is not np.ndarray or values.dtype != dtype or values.shape != shape:
                return False
            item_rows[rows] = values
            return True
        return write

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        if (type(values) is np.ndarray and values.dtype == self.dtype
                and values.shape == (n,) + self.shape):
            arrays += [values, None]  # the fast path: ItemRows.__setitem__
            return
        if not isinstance(values, (np.ndarray, list, tuple)):
            if hasattr(values, "__array__"):
                values = np.asarray(values)
            else:
                try:
                    values = list(values)
                except TypeError:
                    raise _not_iterable(values, n) from None
        if isinstance(values, np.ndarray):
            arrays += [self._array_batch(values, n), None]
        else:
            arrays += [self._item_batch(values, n), None]

    def _array_batch(self, values: np.ndarray, n: int) -> _ItemBatch:
        """A batch array: every env's item has the same kind."""
        known = self._batches_seen.get((values.dtype, values.shape))
        if known is not None:  # checked before, and its values need no check
            return _ItemBatch([(None, values.dtype, values.reshape(n, -1), known)])
        if values.ndim == 0:
            raise _not_iterable(values, n)
        if values.shape[0] != n or not self._fits(values.shape[1:]):
            raise ValueError(
                f"{self.path}: expected shape {(n,) + self.shape} (a batch of {n} x space "
                f"shape {self.shape}, or per env a shape that broadcasts to it) and dtype "
                f"{self.dtype}, got shape {values.shape} and dtype {values.dtype}")
        checked = self._checked_dtype(values, None)
        container = NUMPY_SCALAR if values.ndim == 1 else ARRAY
        kind = self._kind(container, checked.dtype, values.shape[1:])
        if checked is values and not (self.dtype.kind in "iu" and not can_cast(
                values.dtype, self.dtype, "safe")):
            self._batches_seen[(values.dtype, values.shape)] = kind
        return _ItemBatch([(None, checked.dtype, checked.reshape(n, -1), kind)])

    def _item_batch(self, values: Sequence[Any], n: int) -> _ItemBatch:
        """A list or tuple of items: checked one by one, grouped by kind."""
        if len(values) != n:
            raise ValueError(f"{self.path}: expected {n} actions (one per env), got {len(values)}")
        items = [self._item(value, env) for env, value in enumerate(values)]
        first = items[0]
        if all((c, d, a.shape) == (first[0], first[1], first[2].shape) for c, d, a in items):
            container, dtype = first[:2]
            stacked = np.stack([array for _, _, array in items])
            return _ItemBatch([(None, dtype, stacked.reshape(n, -1),
                                self._kind(container, dtype, stacked.shape[1:]))])
        return _ItemBatch([([env], dtype, array.reshape(1, -1),
                            self._kind(container, dtype, array.shape))
                           for env, (container, dtype, array) in enumerate(items)])

    def _item(self, value: Any, env: int) -> Tuple[int, np.dtype, np.ndarray]:
        """``(container, dtype, array)`` of one env's item, checked."""
        if isinstance(value, np.ndarray):
            container, array = ARRAY, value
        else:
            container = (NUMPY_SCALAR if isinstance(value, np.generic) else
                         PY_SCALAR if isinstance(value, (bool, int, float)) else
                         LIST if isinstance(value, list) else
                         TUPLE if isinstance(value, tuple) else ARRAY)
            try:
                array = np.asarray(value)
            except (ValueError, OverflowError) as exc:
                raise ValueError(f"{self.path}: env {env}'s action {value!r} is no "
                                 f"array of numbers ({exc})") from None
        if not self._fits(array.shape):
            raise ValueError(
                f"{self.path}: env {env}'s action has shape {array.shape}, which does not "
                f"broadcast to the space's shape {self.shape}")
        array = self._checked_dtype(array, env)
        return container, array.dtype, array

    def _fits(self, shape: Tuple[int, ...]) -> bool:
        if len(shape) > len(self.shape):
            return False
        tail = self.shape[len(self.shape) - len(shape):]
        return all(d == t or d == 1 for d, t in zip(shape, tail))

    def _checked_dtype(self, array: np.ndarray, env: Optional[int]) -> np.ndarray:
        """``array`` in a dtype the rows carry, or ``ValueError`` (see the module doc)."""
        dtype = array.dtype
        who = f"env {env}'s action" if env is not None else "the actions"
        integers = self.dtype.kind in "iu" and dtype.kind in "biu"  # range-checked below
        if dtype != self.dtype and not integers and not can_cast(dtype, self.dtype, "same_kind"):
            bad = "" if env is not None else self._first_bad_env(array)
            raise ValueError(
                f"{self.path}: expected dtype {self.dtype} (or one that casts to it "
                f"under numpy's 'same_kind' rule), got {who} of dtype {dtype}{bad}; "
                f"convert it, e.g. .astype({self.dtype.name!r})")
        if dtype.str not in _DTYPE_INDEX:
            native = dtype.newbyteorder("=")
            if native.str not in _DTYPE_INDEX:
                raise ValueError(f"{self.path}: {who} of dtype {dtype} take more than "
                                 f"{ITEM_BYTES} bytes per element; convert them, e.g. "
                                 f".astype({self.dtype.name!r})")
            array = array.astype(native)
        if self.dtype.kind in "iu" and array.size and not can_cast(array.dtype, self.dtype, "safe"):
            info = np.iinfo(self.dtype)
            flat = array.reshape(len(array) if env is None else 1, -1)
            out = (flat < info.min) | (flat > info.max)
            if out.any():
                row = int(np.argmax(out.any(axis=1)))
                raise ValueError(
                    f"{self.path}: env {row if env is None else env}'s action holds "
                    f"{flat[row][out[row]][0]}, outside the range [{info.min}, {info.max}] "
                    f"of the space's dtype {self.dtype}")
        return array

    def _first_bad_env(self, array: np.ndarray) -> str:
        """For a float batch of an integer space: the first env holding NaN or a non-integer."""
        if not self._integer or array.dtype.kind != "f":
            return ""
        flat = array.reshape(len(array), -1)
        bad = ~np.isfinite(flat) | (flat != np.round(flat))
        if not bad.any():
            return ""
        env = int(np.argmax(bad.any(axis=1)))
        return f" (env {env}'s action holds {flat[env][bad[env]][0]}, which is no integer)"

    def _kind(self, container: int, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
        key = (container, dtype.str, tuple(shape))
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = np.zeros(2 + len(self.shape), np.int64)
            default_container = NUMPY_SCALAR if not self.shape else ARRAY
            if not (container == default_container and dtype == self.dtype
                    and tuple(shape) == self.shape):
                kind[0] = 1 + container * len(ITEM_DTYPES) + _DTYPE_INDEX[dtype.str]
                kind[1] = len(shape)
                kind[2:2 + len(shape)] = shape
        return kind

    def decode(self, views: Sequence[Any], row: int, pipe: Any) -> Any:
        rows: ItemRows = views[self.first]
        if rows.codes[row]:
            return rows.item(row)
        value = rows.default[row]
        return value.copy() if type(value) is np.ndarray else value


def action_layout(space: spaces.Space[Any], prefix: str = "act",
                  path: str = "action") -> SpaceLayout:
    """The layout of an action space whose envs receive exactly the caller's items
    (under a ``OneOf``: cast to the space's dtypes, numpy's ``"same_kind"`` rule)."""
    return SpaceLayout(space, prefix, path, leaf=ItemNode)
