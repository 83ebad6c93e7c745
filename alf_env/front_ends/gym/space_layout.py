"""Gymnasium spaces as fixed-size shared-memory fields, and back.

:class:`SpaceLayout` turns one per-env space into *fields* ``(name, row shape, dtype)``
of a ``SharedBlock`` (one row per env), a :class:`Node` per sub-space; a space of no
fixed size (Graph, Sequence) is a *pipe leaf*, whose value travels on the pipe. Batched
values are what gymnasium's ``concatenate`` makes, so a vector env returns what
``SyncVectorEnv`` does. Field names are positional (``"obs.0"``, ...), so no space can
make two collide. A row takes numpy's ``"same_kind"`` casts (as gymnasium's
``np.stack(..., out=...)``), a batch its caller's rule; anything else raises
``ValueError`` naming the path (``observation['pos'][1]``), shapes and dtypes.
"""

from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from gymnasium import spaces

from alf_env.control_plane.spec_checks import can_cast

#: A field: ``(name, shape of one row, numpy dtype)``.
FieldSpec = Tuple[str, Tuple[int, ...], np.dtype]
#: Rows of a batch: a slice (contiguous rows) or an integer array.
Rows = Union[slice, np.ndarray]
#: Builds the node of an array sub-space from ``(path, shape, dtype)``.
LeafFactory = Callable[[str, Tuple[int, ...], np.dtype], "Node"]

#: The spaces of one array field (a Discrete's shape is ``()``).
ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
#: dtype of the code points of a Text value (UTF-32, little endian).
TEXT_CODE_DTYPE = np.dtype("<u4")
_TEXT_ENCODING = "utf-32-le"
#: dtype of Text lengths and OneOf indices.
INDEX_DTYPE = np.dtype(np.int64)


class Node:
    """One sub-space of a layout: its fields (from the layout's ``first``) and how its
    values move; ``path`` names it in error messages."""

    is_leaf = False  # an array leaf: a layout of it alone reads its row directly

    def __init__(self, path: str, children: Optional[List["Node"]] = None) -> None:
        self.path = path
        self.first = 0
        self.fields: List[FieldSpec] = []
        self.num_pipe = 0
        self.children: List[Node] = children or []

    def bind(self, views: List[Any]) -> None:
        """Lets leaves replace their raw field views in a layout's ``views`` list."""
        for child in self.children:
            child.bind(views)

    def encode(self, value: Any, casting: str, arrays: List[Optional[np.ndarray]],
               pipe: List[Any]) -> None:
        """Appends one array per field (``None``: leave the row alone) and pipe leaves."""
        raise NotImplementedError

    def decode(self, views: Sequence[np.ndarray], row: int, pipe: Optional[Iterator[Any]]) -> Any:
        """Reads the value of one row (pipe leaves come from ``pipe``; a leaf has none)."""
        raise NotImplementedError

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        """Appends one ``(n, *shape)`` array (or a writer) per field for a batched value."""
        raise NotImplementedError

    def decode_batch(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                     pipe_rows: Sequence[Sequence[Any]], copy: bool) -> Any:
        """The batched value of ``rows`` (``row_list``: the same, as ints); default: row by row."""
        return tuple(self.decode(views, row, iter(())) for row in row_list)

    def exact_batch_writer(self, views: Sequence[Any], rows: slice,
                           n: int) -> Optional[Callable[[Any], bool]]:
        """A leaf's :meth:`SpaceLayout.exact_batch_writer` (default: none)."""
        return None

    def _check_sequence(self, values: Any, length: int, what: str) -> None:
        if not isinstance(values, (tuple, list)) or len(values) != length:
            got = (f"a {type(values).__name__} of length {len(values)}"
                   if isinstance(values, (tuple, list)) else repr(type(values).__name__))
            raise ValueError(f"{self.path}: expected a tuple of {length} {what}, got {got}")


class _ArrayNode(Node):
    """Box, Discrete, MultiDiscrete, MultiBinary: one field of the space's shape."""

    is_leaf = True

    def __init__(self, path: str, shape: Tuple[int, ...], dtype: np.dtype) -> None:
        super().__init__(path)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.fields = [("", self.shape, self.dtype)]

    def _check(self, value: Any, shape: Tuple[int, ...], casting: str,
               batch: Optional[int]) -> np.ndarray:
        array = value if type(value) is np.ndarray else np.asarray(value)
        ok_dtype = array.dtype == self.dtype or can_cast(array.dtype, self.dtype, casting)
        if array.shape != shape or not ok_dtype:
            expected = (f"shape {shape} (a batch of {batch} x space shape {self.shape})"
                        if batch is not None else f"shape {shape}")
            hint = ("" if ok_dtype else
                    f" ({array.dtype} does not cast to {self.dtype} under numpy's "
                    f"{casting!r} rule; convert it, e.g. .astype({self.dtype.name!r}))")
            raise ValueError(
                f"{self.path}: expected {expected} and dtype {self.dtype}, got shape "
                f"{array.shape} and dtype {array.dtype}{hint}")
        return array

    def encode(self, value: Any, casting: str, arrays: List[Any], pipe: List[Any]) -> None:
        arrays.append(self._check(value, self.shape, casting, None))

    def decode(self, views: Sequence[np.ndarray], row: int, pipe: Optional[Iterator[Any]]) -> Any:
        value = views[self.first][row]
        return value.copy() if type(value) is np.ndarray else value

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        arrays.append(self._check(values, (n,) + self.shape, casting, n))

    def decode_batch(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                     pipe_rows: Sequence[Sequence[Any]], copy: bool) -> Any:
        value = views[self.first][rows]
        # A slice is a view of the shared rows; an index array already copied.
        return np.array(value) if copy and isinstance(rows, slice) else value


class _TextNode(Node):
    """Text: UTF-32 code points padded to ``max_length``, plus the length."""

    def __init__(self, path: str, space: spaces.Text) -> None:
        super().__init__(path)
        self.max_length = int(space.max_length)
        self.fields = [("codes", (self.max_length,), TEXT_CODE_DTYPE), ("length", (), INDEX_DTYPE)]

    def _padded(self, value: Any) -> np.ndarray:
        if not isinstance(value, str) or len(value) > self.max_length:
            got = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
            raise ValueError(f"{self.path}: expected a str of at most {self.max_length} "
                             f"characters, got {got}")
        codes = np.frombuffer(value.encode(_TEXT_ENCODING), TEXT_CODE_DTYPE)
        padded = np.zeros(self.max_length, TEXT_CODE_DTYPE)
        padded[:len(codes)] = codes
        return padded

    def encode(self, value: Any, casting: str, arrays: List[Any], pipe: List[Any]) -> None:
        arrays.append(self._padded(value))
        arrays.append(np.asarray(len(value), INDEX_DTYPE))

    def decode(self, views: Sequence[np.ndarray], row: int, pipe: Optional[Iterator[Any]]) -> Any:
        length = int(views[self.first + 1][row])
        return views[self.first][row, :length].tobytes().decode(_TEXT_ENCODING)

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        self._check_sequence(values, n, "str (one per env)")
        arrays.append(np.stack([self._padded(v) for v in values]) if n else
                      np.zeros((0, self.max_length), TEXT_CODE_DTYPE))
        arrays.append(np.asarray([len(v) for v in values], INDEX_DTYPE))


class _TupleNode(Node):
    """Tuple: the fields of each sub-space, in order."""

    def encode(self, value: Any, casting: str, arrays: List[Any], pipe: List[Any]) -> None:
        self._check_sequence(value, len(self.children), "values")
        for child, item in zip(self.children, value):
            child.encode(item, casting, arrays, pipe)

    def decode(self, views: Sequence[np.ndarray], row: int, pipe: Optional[Iterator[Any]]) -> Any:
        return tuple(child.decode(views, row, pipe) for child in self.children)

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        self._check_sequence(values, len(self.children), "batched values")
        for child, item in zip(self.children, values):
            child.encode_batch(item, n, casting, arrays)

    def decode_batch(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                     pipe_rows: Sequence[Sequence[Any]], copy: bool) -> Any:
        return tuple(child.decode_batch(views, rows, row_list, pipe_rows, copy)
                     for child in self.children)


class _DictNode(Node):
    """Dict: the fields of each sub-space, in the space's key order."""

    def __init__(self, path: str, keys: List[str], children: List[Node]) -> None:
        super().__init__(path, children)
        self.keys = keys

    def _items(self, value: Any) -> List[Any]:
        if not isinstance(value, Mapping):
            raise ValueError(f"{self.path}: expected a dict with keys {self.keys}, got "
                             f"{type(value).__name__}")
        missing = [k for k in self.keys if k not in value]
        if missing:
            raise ValueError(f"{self.path}: expected a dict with keys {self.keys}, "
                             f"missing {missing}")
        return [value[k] for k in self.keys]

    def encode(self, value: Any, casting: str, arrays: List[Any], pipe: List[Any]) -> None:
        for child, item in zip(self.children, self._items(value)):
            child.encode(item, casting, arrays, pipe)

    def decode(self, views: Sequence[np.ndarray], row: int, pipe: Optional[Iterator[Any]]) -> Any:
        return {k: c.decode(views, row, pipe) for k, c in zip(self.keys, self.children)}

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        for child, item in zip(self.children, self._items(values)):
            child.encode_batch(item, n, casting, arrays)

    def decode_batch(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                     pipe_rows: Sequence[Sequence[Any]], copy: bool) -> Any:
        return {k: c.decode_batch(views, rows, row_list, pipe_rows, copy)
                for k, c in zip(self.keys, self.children)}


class _OneOfNode(Node):
    """OneOf: the index of the chosen sub-space, then every sub-space's fields."""

    def __init__(self, path: str, children: List[Node]) -> None:
        super().__init__(path, children)
        self.fields = [("index", (), INDEX_DTYPE)]
        self._child_fields = [_all_fields(child) for child in children]

    def _split(self, value: Any) -> Tuple[int, Any]:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise ValueError(f"{self.path}: expected a pair (index, value), got "
                             f"{type(value).__name__}")
        index, item = value
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.children):
            raise ValueError(f"{self.path}: expected an index in [0, {len(self.children)}), "
                             f"got {index!r}")
        return int(index), item

    def encode(self, value: Any, casting: str, arrays: List[Any], pipe: List[Any]) -> None:
        index, item = self._split(value)
        arrays.append(np.asarray(index, INDEX_DTYPE))
        for k, child in enumerate(self.children):
            if k == index:
                child.encode(item, casting, arrays, pipe)
            else:
                arrays.extend([None] * len(self._child_fields[k]))

    def decode(self, views: Sequence[np.ndarray], row: int, pipe: Optional[Iterator[Any]]) -> Any:
        index = views[self.first][row]
        return index, self.children[int(index)].decode(views, row, pipe)

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        self._check_sequence(values, n, "(index, value) pairs (one per env)")
        pairs = [self._split(v) for v in values]
        arrays.append(np.asarray([index for index, _ in pairs], INDEX_DTYPE).reshape(n))
        for k, child in enumerate(self.children):
            batch = [np.zeros((n,) + shape, dtype) for _, shape, dtype in self._child_fields[k]]
            for row, (index, item) in enumerate(pairs):
                if index == k:
                    encoded: List[Optional[np.ndarray]] = []
                    child.encode(item, casting, encoded, [])
                    for column, array in zip(batch, encoded):
                        column[row] = array
            arrays.extend(batch)


class _PipeNode(Node):
    """A space of no fixed size: its value is a pipe leaf."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.num_pipe = 1
        self.pipe_index = 0

    def encode(self, value: Any, casting: str, arrays: List[Any], pipe: List[Any]) -> None:
        pipe.append(value)

    def decode(self, views: Sequence[np.ndarray], row: int, pipe: Optional[Iterator[Any]]) -> Any:
        assert pipe is not None  # only a leaf (read alone) gets no pipe
        return next(pipe)

    def encode_batch(self, values: Any, n: int, casting: str, arrays: List[Any]) -> None:
        raise ValueError(f"{self.path}: a space of no fixed size cannot be written to "
                         f"shared memory")

    def decode_batch(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                     pipe_rows: Sequence[Sequence[Any]], copy: bool) -> Any:
        return tuple(leaves[self.pipe_index] for leaves in pipe_rows)


def _all_fields(node: Node) -> List[FieldSpec]:
    out = list(node.fields)
    for child in node.children:
        out.extend(_all_fields(child))
    return out


def _has_pipe(node: Node) -> bool:
    return node.num_pipe > 0 or any(_has_pipe(c) for c in node.children)


def _build(space: spaces.Space[Any], path: str, leaf: LeafFactory) -> Node:
    """The node tree of ``space`` (fields not numbered yet)."""
    if isinstance(space, ARRAY_SPACES):
        return leaf(path, space.shape or (), space.dtype)
    if isinstance(space, spaces.Text):
        return _TextNode(path, space)
    if isinstance(space, spaces.Tuple):
        return _TupleNode(path, [_build(s, f"{path}[{i}]", leaf)
                                 for i, s in enumerate(space.spaces)])
    if isinstance(space, spaces.Dict):
        keys = list(space.spaces.keys())
        return _DictNode(path, keys, [_build(space.spaces[k], f"{path}[{k!r}]", leaf)
                                      for k in keys])
    if isinstance(space, spaces.OneOf):  # its children write single rows: plain leaves
        children = [_build(s, f"{path}[{i}]", _ArrayNode) for i, s in enumerate(space.spaces)]
        return _PipeNode(path) if any(map(_has_pipe, children)) else _OneOfNode(path, children)
    return _PipeNode(path)  # Graph, Sequence, custom spaces


def _number(node: Node, prefix: str, field_index: int, pipe_index: int,
            fields: List[FieldSpec], pipe_paths: List[str]) -> Tuple[int, int]:
    """Gives ``node`` and its descendants positional fields and pipe indices."""
    node.first = field_index
    for _, shape, dtype in node.fields:
        fields.append((f"{prefix}.{field_index}", shape, dtype))
        field_index += 1
    if isinstance(node, _PipeNode):
        node.pipe_index = pipe_index
        pipe_paths.append(node.path)
        pipe_index += 1
    for child in node.children:
        field_index, pipe_index = _number(child, prefix, field_index, pipe_index,
                                          fields, pipe_paths)
    return field_index, pipe_index


class SpaceLayout:
    """How values of one gymnasium ``space`` (per env) live in shared-memory rows (the pipe
    path's twin: ``PipeLayout``). ``prefix`` starts the field names (unique per block,
    e.g. ``"obs"``), ``path`` names the value in errors (e.g. ``"observation"``), ``leaf``
    builds the node of each array sub-space (default: one field of its shape and dtype)."""

    def __init__(self, space: spaces.Space[Any], prefix: str, path: str,
                 leaf: Optional[LeafFactory] = None) -> None:
        self.space = space
        self._root = _build(space, path, leaf or _ArrayNode)
        fields: List[FieldSpec] = []
        pipe_paths: List[str] = []
        _number(self._root, prefix, 0, 0, fields, pipe_paths)
        self.fields: Tuple[FieldSpec, ...] = tuple(fields)
        self.field_names: Tuple[str, ...] = tuple(name for name, _, _ in fields)
        self.pipe_paths: Tuple[str, ...] = tuple(pipe_paths)
        # One array leaf: the per-row calls of the workers' hot path skip the tree walk.
        self._single = self._root if isinstance(self._root, _ArrayNode) else None
        self._leaf = self._root if self._root.is_leaf else None

    @property
    def is_single_array(self) -> bool:
        """Whether the space is one array field (Box, Discrete, ...): written by one copy."""
        return self._single is not None

    @property
    def num_pipe_leaves(self) -> int:
        """How many sub-values travel on the pipe (0: all in shared memory)."""
        return len(self.pipe_paths)

    def views(self, block_views: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        """The field views (in order) from a block's ``views``; a leaf may wrap its own."""
        views = [block_views[name] for name in self.field_names]
        self._root.bind(views)
        return views

    def write_row(self, views: Sequence[np.ndarray], row: int, value: Any,
                  casting: str = "same_kind") -> List[Any]:
        """Writes one env's ``value`` into ``row`` (a worker, what its env returned); its
        pipe leaves. ``ValueError`` if it does not fit the space (nothing written)."""
        single = self._single
        if (single is not None and type(value) is np.ndarray and value.dtype == single.dtype
                and value.shape == single.shape):
            views[0][row] = value  # exact: nothing to check or cast
            return []
        arrays: List[Optional[np.ndarray]] = []
        pipe: List[Any] = []
        self._root.encode(value, casting, arrays, pipe)
        for view, array in zip(views, arrays):
            if array is not None:
                view[row] = array
        return pipe

    def read_row(self, views: Sequence[np.ndarray], row: int,
                 pipe_leaves: Sequence[Any] = ()) -> Any:
        """The value of ``row``, a copy (a worker reads its action)."""
        if self._leaf is not None:
            return self._leaf.decode(views, row, None)
        return self._root.decode(views, row, iter(pipe_leaves))

    def encode_batch(self, values: Any, n: int, casting: str = "safe") -> List[Any]:
        """Checks a batched value of ``n`` envs (``ValueError`` naming the path, shapes and
        dtypes); for :meth:`write_rows`, per field an ``(n, *shape)`` array, what a leaf
        that keeps its own rows writes itself (``write(view, rows)``), or ``None``."""
        arrays: List[Any] = []
        self._root.encode_batch(values, n, casting, arrays)
        return arrays

    @staticmethod
    def write_rows(views: Sequence[Any], rows: Rows, arrays: Sequence[Any]) -> None:
        for view, array in zip(views, arrays):
            if type(array) is np.ndarray:
                view[rows] = array
            elif array is not None:
                array.write(view, rows)

    def exact_batch_writer(self, views: Sequence[Any], rows: slice,
                           n: int) -> Optional[Callable[[Any], bool]]:
        """For the synchronous step: a function that writes a batch of ``n`` values of exactly
        the space's dtype and shape into ``rows`` in one copy and returns ``True``, else
        ``False``; ``None`` but for a leaf that keeps its own rows (action items)."""
        return None if self._leaf is None else self._leaf.exact_batch_writer(views, rows, n)

    def batch_reader(self, views: Sequence[np.ndarray], rows: slice,
                     copy: bool) -> Optional[Callable[[], Any]]:
        """For the synchronous step: a function that reads the batch of ``rows`` as
        :meth:`read_rows` does, when it is one field; else ``None``."""
        if self._single is None:
            return None
        field = views[self._single.first]
        head = field[rows]  # a view, made once
        return head.copy if copy else lambda: field[rows]

    def read_rows(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                  pipe_rows: Optional[Sequence[Sequence[Any]]] = None, copy: bool = True) -> Any:
        """The batched value of ``rows``, as gymnasium's ``concatenate`` makes it. ``rows``:
        a slice (array leaves view the rows unless ``copy``) or an index array (copies);
        ``row_list``: the same rows as ints; ``pipe_rows``: each row's pipe leaves."""
        return self._root.decode_batch(views, rows, row_list, pipe_rows or (), copy)
