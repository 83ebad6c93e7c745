"""Utilities for nested structures ("nests").

A nest is a tree whose inner nodes are containers and whose leaves are
anything else. The containers are:

* ``tuple`` and ``list``: children in positional order;
* ``namedtuple`` (any tuple subclass with ``_fields``): children in field
  order, packed back into the same namedtuple type;
* ``dict`` (any ``collections.abc.Mapping``): children in SORTED key order,
  packed back into the same mapping type, keeping the structure's own key
  (insertion) order.

Everything else is a leaf: numpy arrays, torch tensors, numbers, strings,
``None``, specs... An empty container such as ``()`` or ``{}`` is a nest with
no leaves, which is how an unused ``TimeStep`` field (default ``()``) is
represented.

Paths name a leaf inside a nest by joining the keys, indices or field names on
the way down with ``"."``, e.g. ``"observation.0"`` or ``"env_info.speed"``.
The path of a nest that is itself a leaf is ``""``.

Structure mismatches raise :class:`NestStructureError` (a leaf against a
container, different lengths or keys) or :class:`NestTypeError` (different
container types); the message names the path where the nests differ and what
was expected vs got. Both are ``RuntimeError`` (what ALF's nest raises) and,
respectively, ``ValueError`` / ``TypeError`` (what gymnasium-style callers
catch), so ``except RuntimeError``, ``except ValueError`` and ``except
TypeError`` keep working.

The module is read top to bottom: what a node is (its kind, cached per
type), the paths of leaves, the errors, the walks over whole nests (flatten,
pack, compare, map, stack) and, last, :func:`compile_nest`: flatten and pack
compiled once for one spec, for the hot paths that move values of one spec
every step (a ``TimeStep``, an action).
"""

import abc
import collections
import collections.abc
import sys
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Type

import numpy as np

__all__ = [
    "NestStructureError",
    "NestTypeError",
    "is_namedtuple",
    "is_nested",
    "flatten",
    "flatten_with_path",
    "join_path",
    "pack_sequence_as",
    "assert_same_structure",
    "map_structure",
    "map_structure_with_path",
    "py_map_structure_with_path",
    "stack",
    "compile_nest",
]

# -- node kinds ---------------------------------------------------------------

# Every public function of this module walks nests node by node, and at each node needs
# the answer of ``is_nested`` / ``isinstance(x, Mapping)`` / ``is_namedtuple``.
# Asking ``isinstance`` against ``collections.abc.Mapping`` (an ABC check) at
# every node dominated the per-step cost of the environments. So the answer
# is computed once per *type* with exactly those predicates and kept in
# ``KINDS``:
#
# * ``LEAF``: not a tuple, list or Mapping;
# * ``SEQUENCE``: a list (or subclass), or a tuple (sub)class without
#   ``_fields``: children in iteration order (what ``enumerate`` gives);
# * ``NAMEDTUPLE``: a tuple subclass with ``_fields``: children are
#   ``zip(type(x)._fields, x)``;
# * ``NAMEDTUPLE_PLAIN``: the same, for a class that keeps ``tuple.__iter__``,
#   so iterating it directly gives the same children as the ``zip`` whenever
#   ``_fields`` is at least as long as the tuple (checked per node);
# * ``MAPPING``: a ``collections.abc.Mapping``: children in sorted key order.
#
# Why caching per type is exact: ``isinstance(x, tuple/list)`` depends only on
# the type's bases, and ``isinstance(x, Mapping)`` on the bases and on ABC
# registrations; every registration bumps ``abc.get_cache_token()``, and the
# cache is dropped whenever that token changed (checked once per public call).
# Types that override ``__class__`` (proxies, mocks) can make ``isinstance``
# answer per instance, so they are never cached. What is assumed is only what
# ``abc`` itself assumes: a class does not change its bases, gain or lose
# ``_fields`` or swap ``__iter__`` after it has been used in a nest.
LEAF = 0
SEQUENCE = 1
NAMEDTUPLE = 2
NAMEDTUPLE_PLAIN = 3
MAPPING = 4

# Builtin containers: their answers can never change (builtins cannot be
# re-based, and ``dict`` is a Mapping by a registration that cannot be undone).
BUILTIN_KINDS: Dict[type, int] = {tuple: SEQUENCE, list: SEQUENCE, dict: MAPPING}
KINDS: Dict[type, int] = dict(BUILTIN_KINDS)
# A bound on the cache, so code that creates classes on the fly (namedtuples
# made per call) cannot make it grow without limit; refilling is cheap.
_MAX_CACHED_KINDS = 4096
_get_cache_token = abc.get_cache_token
_kinds_token = _get_cache_token()
_Mapping = collections.abc.Mapping


def sync_kinds() -> None:
    """Drops the kind cache if an ABC registration happened since it was filled."""
    global _kinds_token
    token = _get_cache_token()
    if token != _kinds_token:
        KINDS.clear()
        KINDS.update(BUILTIN_KINDS)
        _kinds_token = token


def _lies_about_class(cls: type) -> bool:
    """Whether instances of ``cls`` may report a ``__class__`` other than ``cls``."""
    return any("__class__" in vars(base) for base in cls.__mro__[:-1])


def new_kind_of(value: Any) -> int:
    """The kind of ``value`` from the original predicates; caches it if safe."""
    cls = type(value)
    if isinstance(value, _Mapping):
        kind = MAPPING
    elif isinstance(value, tuple) and hasattr(cls, "_fields"):
        kind = (NAMEDTUPLE_PLAIN if issubclass(cls, tuple) and cls.__iter__ is tuple.__iter__
                else NAMEDTUPLE)
    elif isinstance(value, (tuple, list)):
        kind = SEQUENCE
    else:
        kind = LEAF
    if not _lies_about_class(cls):
        if len(KINDS) >= _MAX_CACHED_KINDS:
            KINDS.clear()
            KINDS.update(BUILTIN_KINDS)
        KINDS[cls] = kind
    return kind


def kind_of(value: Any) -> int:
    """The cached kind of ``value`` (see above)."""
    kind = KINDS.get(type(value))
    if kind is None:
        return new_kind_of(value)
    return kind


def namedtuple_children(value: Any, kind: int) -> Any:
    """The children of a namedtuple node: what ``zip(_fields, value)`` yields."""
    fields = type(value)._fields
    # For a class keeping tuple.__iter__, the zip yields every element exactly
    # when _fields is at least as long as the tuple itself.
    if (kind == NAMEDTUPLE_PLAIN and type(fields) is tuple
            and len(fields) >= tuple.__len__(value)):
        return value
    return [child for _, child in zip(fields, value)]


def is_namedtuple(value: Any) -> bool:
    """Whether ``value`` is an instance of a namedtuple type."""
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def is_nested(value: Any) -> bool:
    """Whether ``value`` is a container (tuple, list, namedtuple or mapping)."""
    sync_kinds()
    return kind_of(value) != LEAF


def sorted_keys(mapping: "collections.abc.Mapping[Any, Any]") -> List[Any]:
    """Keys of ``mapping`` in sorted order (by ``str`` for unorderable mixes)."""
    try:
        return sorted(mapping)
    except TypeError:
        return sorted(mapping, key=lambda k: (type(k).__name__, str(k)))


# -- paths --------------------------------------------------------------------

_PATH_SEPARATOR = "."


def join_path(path: str, key: Any) -> str:
    """The path of the child ``key`` of the node at ``path``."""
    return f"{path}{_PATH_SEPARATOR}{key}" if path else str(key)


def _flatten_with_path_into(nest: Any, path: str,
                            out: List[Tuple[str, Any]]) -> None:
    kind = kind_of(nest)
    if kind == LEAF:
        out.append((path, nest))
        return
    if kind == SEQUENCE:
        pairs: Any = enumerate(nest)
    elif kind == MAPPING:
        pairs = [(k, nest[k]) for k in sorted_keys(nest)]
    else:
        pairs = list(zip(type(nest)._fields, nest))
    for key, child in pairs:
        _flatten_with_path_into(child, join_path(path, key), out)


def flatten_with_path(nest: Any) -> List[Tuple[str, Any]]:
    """Returns ``(path, leaf)`` pairs of ``nest``, in the order of :func:`flatten`.

    Args:
        nest: a nest or a single leaf.

    Returns:
        A list of ``(dotted_path, leaf)``; the root leaf's path is ``""``.
    """
    sync_kinds()
    out: List[Tuple[str, Any]] = []
    _flatten_with_path_into(nest, "", out)
    return out


# -- errors -------------------------------------------------------------------

class NestStructureError(RuntimeError, ValueError):
    """Two nests differ in structure (a leaf against a container, lengths, keys).

    A ``RuntimeError`` and a ``ValueError``: see the module docstring.
    """


class NestTypeError(NestStructureError, TypeError):
    """Two nests have different container types (e.g. a list against a tuple);
    also a ``TypeError`` (see the module docstring)."""


def _describe(value: Any) -> str:
    """A short description of a node, for error messages."""
    if isinstance(value, collections.abc.Mapping):
        return f"{type(value).__name__} with keys {sorted_keys(value)}"
    if is_nested(value):
        return f"{type(value).__name__} of length {len(value)}"
    return f"leaf of type {type(value).__name__}"


class Mismatch(Exception):
    """A structure difference found deep in a nest, carrying its path upwards.

    The dotted path is only built (by the caller of the walk) when the nests
    differ, so equal nests cost no string formatting.
    """

    def __init__(self, error: Type[Exception], expected: Any, got: Any,
                 keys: bool = False) -> None:
        super().__init__()
        self.error = error
        self.expected = expected
        self.got = got
        self.keys = keys
        self.reversed_path: List[Any] = []

    def to_error(self) -> Exception:
        path = ""
        for key in reversed(self.reversed_path):
            path = join_path(path, key)
        where = f"path '{path}'" if path else "the root"
        a, b = self.expected, self.got
        if self.keys:
            a_keys, b_keys = sorted_keys(a), sorted_keys(b)
            missing = [k for k in a_keys if k not in b]
            extra = [k for k in b_keys if k not in a]
            return self.error(
                f"The two nests differ at {where}: expected "
                f"keys {a_keys}, got keys {b_keys} (missing {missing}, "
                f"unexpected {extra}).")
        return self.error(
            f"The two nests differ at {where}: expected "
            f"{_describe(a)}, got {_describe(b)}.")


# -- walks over whole nests ---------------------------------------------------

def _flatten_into(nest: Any, kind: int, out: List[Any]) -> None:
    """Appends the leaves of the container ``nest`` (of ``kind``) to ``out``."""
    if kind == SEQUENCE:
        children = nest
    elif kind == MAPPING:
        children = [nest[k] for k in sorted_keys(nest)]
    else:
        children = namedtuple_children(nest, kind)
    append = out.append
    kinds_get = KINDS.get
    for child in children:
        child_kind = kinds_get(type(child))
        if child_kind is None:
            child_kind = new_kind_of(child)
        if child_kind == LEAF:
            append(child)
        elif type(child) in BUILTIN_KINDS and not child:
            continue  # an empty builtin container (e.g. an unused field) has no leaves
        else:
            _flatten_into(child, child_kind, out)


def flatten(nest: Any) -> List[Any]:
    """Returns the leaves of ``nest`` as a flat list, in canonical order.

    Args:
        nest: a nest or a single leaf.

    Returns:
        The leaves; ``[nest]`` if ``nest`` is itself a leaf, ``[]`` for an empty
        container.
    """
    sync_kinds()
    kind = kind_of(nest)
    if kind == LEAF:
        return [nest]
    out: List[Any] = []
    _flatten_into(nest, kind, out)
    return out


def _pack(structure: Any, kind: int, leaves: Iterator[Any]) -> Any:
    """Builds a container like ``structure`` (of ``kind``) from ``leaves``.

    Raises ``StopIteration`` when ``leaves`` runs out (the caller turns that
    into its leaf-count error).
    """
    kinds_get = KINDS.get
    if kind == MAPPING:
        keys = sorted_keys(structure)
        children: Any = [structure[k] for k in keys]
    elif kind == SEQUENCE:
        children = structure
    else:
        children = namedtuple_children(structure, kind)
    values: List[Any] = []
    append = values.append
    for child in children:
        child_type = type(child)
        child_kind = kinds_get(child_type)
        if child_kind is None:
            child_kind = new_kind_of(child)
        if child_kind == LEAF:
            append(next(leaves))
        elif child_type in BUILTIN_KINDS and not child:
            # What packing an empty builtin container gives: tuple([]) is the
            # () singleton, list([]) and dict([]) are new empty containers.
            append(() if child_type is tuple else child_type())
        else:
            append(_pack(child, child_kind, leaves))
    cls = type(structure)
    if kind == SEQUENCE:
        return cls(values)
    if kind != MAPPING:
        return cls(*values)
    # Keep the structure's own key order (it matters to OrderedDict).
    if cls is dict:
        # ``update`` keeps the position of existing keys: the result has the
        # structure's key order and the values matched by key.
        packed = dict.fromkeys(structure)
        packed.update(zip(keys, values))
        return packed
    by_key = dict(zip(keys, values))
    items = [(k, by_key[k]) for k in structure]
    if isinstance(structure, collections.defaultdict):
        return cls(structure.default_factory, items)
    return cls(items)


def _leaf_count_error(structure: Any, got: int) -> NestStructureError:
    expected = len(flatten(structure))
    return NestStructureError(
        f"pack_sequence_as: the structure has {expected} leaves but the "
        f"flat sequence has {got} elements. "
        f"Structure: {structure!r}")


_NO_LEAF = object()


def pack_sequence_as(structure: Any, flat_sequence: Sequence[Any]) -> Any:
    """Packs a flat sequence of leaves into the shape of ``structure``.

    The inverse of :func:`flatten`: ``pack_sequence_as(s, flatten(s))`` equals
    ``s``. Namedtuple and mapping types of ``structure`` are preserved.

    Args:
        structure: the nest giving the shape (its leaves are ignored).
        flat_sequence: the leaves, in canonical order.

    Returns:
        A nest with the structure of ``structure`` and the given leaves.

    Raises:
        NestStructureError: if the number of leaves does not match
            ``structure`` (a ``RuntimeError`` and a ``ValueError``).
    """
    sync_kinds()
    # A list is only read here, so it needs no defensive copy.
    flat = flat_sequence if type(flat_sequence) is list else list(flat_sequence)
    kind = kind_of(structure)
    if kind == LEAF:
        if len(flat) != 1:
            raise _leaf_count_error(structure, len(flat))
        return flat[0]
    # Packing and counting in one walk: the count is checked when the walk
    # ends or fails. A wrong count is reported before any other failure, as
    # when the leaves were counted first.
    leaves = iter(flat)
    try:
        packed = _pack(structure, kind, leaves)
    except Exception:
        if len(flatten(structure)) == len(flat):
            raise
        packed = _NO_LEAF  # the count error is raised below, outside the handler
    if packed is _NO_LEAF or next(leaves, _NO_LEAF) is not _NO_LEAF:
        raise _leaf_count_error(structure, len(flat))
    return packed


def _assert_same_structure(a: Any, b: Any, check_types: bool) -> None:
    a_kind, b_kind = kind_of(a), kind_of(b)
    if a_kind == LEAF or b_kind == LEAF:
        if a_kind != b_kind:
            raise Mismatch(NestStructureError, a, b)
        return
    a_map = a_kind == MAPPING
    b_map = b_kind == MAPPING
    if a_map != b_map or (check_types and not a_map and type(a) is not type(b)):
        raise Mismatch(NestTypeError, a, b)
    kinds_get = KINDS.get
    if a_map:
        a_keys = sorted_keys(a)
        if a_keys != sorted_keys(b):
            raise Mismatch(NestStructureError, a, b, keys=True)
        for k in a_keys:
            a_child, b_child = a[k], b[k]
            # Two leaves always match: skip the call.
            if kinds_get(type(a_child)) == LEAF and kinds_get(type(b_child)) == LEAF:
                continue
            try:
                _assert_same_structure(a_child, b_child, check_types)
            except Mismatch as mismatch:
                mismatch.reversed_path.append(k)
                raise
        return
    if len(a) != len(b):
        raise Mismatch(NestStructureError, a, b)
    a_children = a if a_kind == SEQUENCE else namedtuple_children(a, a_kind)
    b_children = b if b_kind == SEQUENCE else namedtuple_children(b, b_kind)
    for index, (a_child, b_child) in enumerate(zip(a_children, b_children)):
        a_type = type(a_child)
        if kinds_get(a_type) == LEAF and kinds_get(type(b_child)) == LEAF:
            continue
        if (a_type is type(b_child) and a_type in BUILTIN_KINDS and not a_child
                and not b_child):
            continue  # two empty builtin containers of one type always match
        try:
            _assert_same_structure(a_child, b_child, check_types)
        except Mismatch as mismatch:
            # The key of a child is its index, or its field for a namedtuple.
            mismatch.reversed_path.append(
                index if a_kind == SEQUENCE else type(a)._fields[index])
            raise


def assert_same_structure(nest1: Any, nest2: Any, check_types: bool = True) -> None:
    """Asserts that two nests have the same structure.

    Two nests have the same structure when their containers sit at the same
    places, have the same lengths (or keys) and, with ``check_types``, the same
    sequence types (a ``list`` does not match a ``tuple``, a namedtuple only
    matches the same namedtuple type; any two mappings match). Leaves are not
    compared.

    Args:
        nest1: the expected structure.
        nest2: the structure to check.
        check_types: whether sequence types must match exactly.

    Raises:
        NestStructureError: a leaf against a container, or different
            lengths / keys (a ``RuntimeError`` and a ``ValueError``).
        NestTypeError: different container types (also a ``TypeError``).
        The message names the path where the nests differ and gives the
        expected and actual node.
    """
    sync_kinds()
    try:
        _assert_same_structure(nest1, nest2, check_types)
        return
    except Mismatch as found:
        mismatch = found
    # Raised outside the handler, so the error carries no internal context.
    raise mismatch.to_error()


def map_structure(fn: Callable[..., Any], *nests: Any, check_types: bool = True) -> Any:
    """Applies ``fn`` to the corresponding leaves of ``nests``.

    Args:
        fn: called as ``fn(leaf_1, ..., leaf_n)`` for each leaf position.
        *nests: one or more nests with the same structure.
        check_types: see :func:`assert_same_structure`.

    Returns:
        A nest with the structure of ``nests[0]`` holding ``fn``'s results.

    Raises:
        NestStructureError: if the nests' structures differ (a
            ``RuntimeError`` and a ``ValueError``; :class:`NestTypeError`,
            also a ``TypeError``, for different container types).
    """
    if not nests:
        raise ValueError("map_structure needs at least one nest, got none.")
    first = nests[0]
    if len(nests) == 1:
        return pack_sequence_as(first, [fn(leaf) for leaf in flatten(first)])
    for other in nests[1:]:
        assert_same_structure(first, other, check_types)
    flats = [flatten(n) for n in nests]
    return pack_sequence_as(first, [fn(*leaves) for leaves in zip(*flats)])


def map_structure_with_path(fn: Callable[..., Any], *nests: Any,
                            check_types: bool = True) -> Any:
    """Like :func:`map_structure` but calls ``fn(path, *leaves)``.

    Args:
        fn: called as ``fn(path, leaf_1, ..., leaf_n)`` where ``path`` is the
            dotted path of the leaf (e.g. ``"observation.0"``; ``""`` when the
            nest is a single leaf).
        *nests: one or more nests with the same structure.
        check_types: see :func:`assert_same_structure`.

    Returns and raises as :func:`map_structure`.
    """
    if not nests:
        raise ValueError("map_structure_with_path needs at least one nest, got none.")
    first = nests[0]
    for other in nests[1:]:
        assert_same_structure(first, other, check_types)
    others = [flatten(n) for n in nests[1:]]
    # The leaves of ``first`` come from the same walk as its paths.
    return pack_sequence_as(first, [fn(path, leaf, *rest) for (path, leaf), *rest
                                    in zip(flatten_with_path(first), *others)])


# ALF's name of map_structure_with_path (same paths, e.g. "observation.0").
py_map_structure_with_path = map_structure_with_path


def stack(nests: Sequence[Any]) -> Any:
    """Stacks same-structured nests of arrays along a new leading axis.

    Leaves are stacked with ``torch.stack`` when they are tensors, else with
    ``numpy.stack``.

    Args:
        nests: a non-empty sequence of nests with identical structure.

    Returns:
        One nest whose leaves have an extra leading dimension ``len(nests)``.

    Raises:
        ValueError: if ``nests`` is empty or the structures differ.
    """
    if len(nests) == 0:
        raise ValueError("stack needs at least one nest, got an empty sequence.")

    # No tensor can exist unless torch was imported: this module does not
    # import it (a worker that never uses torch does not pay ~1 s for it).
    torch = sys.modules.get("torch")

    def _stack(*leaves: Any) -> Any:
        if torch is not None and torch.is_tensor(leaves[0]):
            return torch.stack([torch.as_tensor(x) for x in leaves])
        return np.stack(leaves)

    return map_structure(_stack, *nests)


# -- compiled for one spec -----------------------------------------------------

# ``flatten`` and ``pack_sequence_as`` inspect every node of a value on every
# call. A worker or a trainer that moves values of one spec every step (a
# ``TimeStep``, an action) compiles the spec once with compile_nest and gets
# the same leaves and the same packed values for a fraction of that.


class _Field(NamedTuple):
    """How :func:`compile_nest` moves one field of a namedtuple spec."""
    name: str
    sub: Any                    # the field's spec if it is a nest, else None (a leaf)
    num_leaves: int             # its number of leaves
    empty: Optional[type]       # the type of a bare empty container, rebuilt per value
    dict_order: Optional[Tuple[List[Any], List[int]]]  # see _dict_order


def _dict_order(spec: Any) -> Optional[Tuple[List[Any], List[int]]]:
    """For a plain ``dict`` of leaves (an ``env_info`` spec): its keys in its own
    order and, for each, the position of its leaf in ``flatten`` order
    (sorted keys), so that packing is one ``dict(zip(...))`` with what
    ``pack_sequence_as`` gives; ``None`` for anything else."""
    if type(spec) is not dict or not spec or any(is_nested(v) for v in spec.values()):
        return None
    key_order = sorted_keys(spec)
    keys = list(spec)
    return keys, [key_order.index(k) for k in keys]


def _compile_dict(spec: Dict[Any, Any], dict_order: Tuple[List[Any], List[int]]
                  ) -> Tuple[Callable[[Any], List[Any]], Callable[[List[Any]], Any]]:
    """:func:`compile_nest` of a plain ``dict`` of leaves (see :func:`_dict_order`).

    A plain dict with the spec's keys and no nest where the spec has a leaf is
    read key by key in ``flatten`` order; anything else by :func:`flatten`
    itself.
    """
    keys, positions = dict_order
    key_order = sorted_keys(spec)

    def flatten_value(value: Any) -> List[Any]:
        if type(value) is dict and len(value) == len(key_order):
            try:
                leaves = [value[k] for k in key_order]
            except KeyError:  # other keys: flatten names the mismatch
                return flatten(value)
            if not any(isinstance(leaf, (list, tuple, dict)) for leaf in leaves):
                return leaves
        return flatten(value)

    def pack_leaves(leaves: List[Any]) -> Any:
        return dict(zip(keys, [leaves[p] for p in positions]))

    return flatten_value, pack_leaves


def compile_nest(spec: Any) -> Tuple[Callable[[Any], List[Any]], Callable[[List[Any]], Any]]:
    """``(flatten, pack)`` for values shaped like ``spec``, faster than
    :func:`flatten` and :func:`pack_sequence_as`.

    A namedtuple spec (a ``TimeStep``) is taken apart field by field: a leaf
    field directly, a nested field by those functions (a plain dict of leaves
    is packed by key). A plain dict spec of leaves (an ``env_info``, a dict
    observation) is read and built by key. A value of another type, or
    with a nest where the spec has a leaf, is flattened by :func:`flatten`;
    a nested field the spec has empty but the value has not is kept whole.
    Either way leaves that do not fit the spec (their count, shapes or
    dtypes) are left for the caller to refuse (e.g. the shared-memory
    rows' writers) and name.
    """
    if not is_nested(spec):
        return (lambda value: [value]), (lambda leaves: leaves[0])
    if not is_namedtuple(spec):
        dict_order = _dict_order(spec)
        if dict_order is not None:
            return _compile_dict(spec, dict_order)
        return flatten, lambda leaves: pack_sequence_as(spec, leaves)
    fields = []
    for name, sub in zip(spec._fields, spec):
        nested = is_nested(sub)
        count = len(flatten(sub)) if nested else 1
        # A field that is a bare empty tuple, list or dict (a TimeStep's
        # ``untransformed`` and an info-less ``env_info``) is rebuilt by its
        # type: a new empty value each time, at a tenth of pack_sequence_as.
        empty = type(sub) if type(sub) in (tuple, list, dict) and not sub else None
        fields.append(_Field(name, sub if nested else None, count, empty,
                             _dict_order(sub) if nested and empty is None else None))
    cls = type(spec)

    def flatten_value(value: Any) -> List[Any]:
        if type(value) is not cls:
            return flatten(value)
        out: List[Any] = []
        for field_spec in fields:
            field = getattr(value, field_spec.name)
            if field_spec.sub is None:
                if isinstance(field, (list, tuple, dict)):
                    return flatten(value)  # a nest where the spec has a leaf
                out.append(field)
            elif field_spec.num_leaves:
                out.extend(flatten(field))
            elif field:  # the spec has none here: keep it, to be refused
                out.append(field)
        return out

    if all(f.sub is None or f.empty is not None for f in fields):
        # Every field a leaf or a bare empty container (a TimeStep of one
        # observation, one action and no info: the common case, packed once
        # per step by FastParallelEnvironment): the leaves in field order,
        # each empty field a new empty value, with no walk of the fields.
        empty_at = [(k, f.empty) for k, f in enumerate(fields) if f.empty is not None]

        def pack_flat(leaves: List[Any]) -> Any:
            values = list(leaves)
            for k, empty in empty_at:
                values.insert(k, empty())
            return cls(*values)

        return flatten_value, pack_flat

    def pack_leaves(leaves: List[Any]) -> Any:
        values, i = [], 0
        for _, sub, count, empty, dict_order in fields:
            if sub is None:
                values.append(leaves[i])
            elif empty is not None:
                values.append(empty())
            elif dict_order is not None:
                keys, positions = dict_order
                values.append(dict(zip(keys, [leaves[i + p] for p in positions])))
            else:
                values.append(pack_sequence_as(sub, leaves[i:i + count]))
            i += count
        return cls(*values)

    return flatten_value, pack_leaves
