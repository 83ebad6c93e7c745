"""Nests: trees of tuples, lists, namedtuples and mappings, with anything else as leaves.

See docs/contract.rst, "Data model", and docs/migration.rst (what differs from ALF's
nest). Mismatch errors are ``RuntimeError`` (as ALF's) and ``ValueError`` / ``TypeError``
(what gymnasium-style callers catch).
"""

import abc
import collections
import collections.abc
import sys
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Type

import numpy as np

__all__ = ["NestStructureError", "NestTypeError", "is_namedtuple", "is_nested", "flatten",
           "flatten_with_path", "join_path", "pack_sequence_as", "assert_same_structure",
           "map_structure", "map_structure_with_path", "py_map_structure_with_path", "stack",
           "compile_nest"]

# -- node kinds ---------------------------------------------------------------

# An ABC check (``isinstance(x, Mapping)``) at every node dominated the per-step cost of
# the environments, so each type's kind is cached in ``KINDS``. That is exact: the answer
# depends only on the bases and on ABC registrations, each of which bumps
# ``abc.get_cache_token()`` and so drops the cache. Proxies (types overriding
# ``__class__``) are never cached. NAMEDTUPLE_PLAIN keeps ``tuple.__iter__``.
LEAF, SEQUENCE, NAMEDTUPLE, NAMEDTUPLE_PLAIN, MAPPING = range(5)

# Builtins cannot be re-based or unregistered: their kinds never change.
BUILTIN_KINDS: Dict[type, int] = {tuple: SEQUENCE, list: SEQUENCE, dict: MAPPING}
KINDS: Dict[type, int] = dict(BUILTIN_KINDS)
# Bounded, so namedtuple classes made per call cannot grow it without limit.
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
    if not any("__class__" in vars(base) for base in cls.__mro__[:-1]):  # not a proxy
        if len(KINDS) >= _MAX_CACHED_KINDS:
            KINDS.clear()
            KINDS.update(BUILTIN_KINDS)
        KINDS[cls] = kind
    return kind


def kind_of(value: Any) -> int:
    kind = KINDS.get(type(value))
    return new_kind_of(value) if kind is None else kind


def namedtuple_children(value: Any, kind: int) -> Any:
    """The children of a namedtuple node: what ``zip(_fields, value)`` yields."""
    fields = type(value)._fields
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

def join_path(path: str, key: Any) -> str:
    """The path of the child ``key`` of the node at ``path``."""
    return f"{path}.{key}" if path else str(key)


def field_name(prefix: str, path: str) -> str:
    """``prefix.path``, or ``prefix`` for the root path ``""``: a leaf named in an error."""
    return f"{prefix}.{path}" if path else prefix


def _flatten_with_path_into(nest: Any, path: str, out: List[Tuple[str, Any]]) -> None:
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
    """Two nests differ in structure (a leaf against a container, lengths, keys)."""


class NestTypeError(NestStructureError, TypeError):
    """Two nests have different container types (e.g. a list against a tuple)."""


def _describe(value: Any) -> str:
    if isinstance(value, collections.abc.Mapping):
        return f"{type(value).__name__} with keys {sorted_keys(value)}"
    if is_nested(value):
        return f"{type(value).__name__} of length {len(value)}"
    return f"leaf of type {type(value).__name__}"


class Mismatch(Exception):
    """A structure difference carrying its path upwards: equal nests format no path."""

    def __init__(self, error: Type[Exception], expected: Any, got: Any, keys: bool = False) -> None:
        super().__init__()
        self.error, self.expected, self.got, self.keys = error, expected, got, keys
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
            return self.error(f"The two nests differ at {where}: expected keys {a_keys}, got "
                              f"keys {b_keys} (missing {missing}, unexpected {extra}).")
        return self.error(f"The two nests differ at {where}: expected {_describe(a)}, got "
                          f"{_describe(b)}.")


# -- walks over whole nests ---------------------------------------------------

def _flatten_into(nest: Any, kind: int, out: List[Any]) -> None:
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
        The leaves; ``[nest]`` for a leaf, ``[]`` for an empty container.
    """
    sync_kinds()
    kind = kind_of(nest)
    if kind == LEAF:
        return [nest]
    out: List[Any] = []
    _flatten_into(nest, kind, out)
    return out


def _pack(structure: Any, kind: int, leaves: Iterator[Any]) -> Any:
    """A container like ``structure`` from ``leaves``; ``StopIteration`` if they run out."""
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
            # What packing gives: tuple([]) is the () singleton, the others new.
            append(() if child_type is tuple else child_type())
        else:
            append(_pack(child, child_kind, leaves))
    cls = type(structure)
    if kind == SEQUENCE:
        return cls(values)
    if kind != MAPPING:
        return cls(*values)
    # The structure's own key order (it matters to OrderedDict).
    if cls is dict:
        packed = dict.fromkeys(structure)  # update() keeps these keys' positions
        packed.update(zip(keys, values))
        return packed
    by_key = dict(zip(keys, values))
    items = [(k, by_key[k]) for k in structure]
    if isinstance(structure, collections.defaultdict):
        return cls(structure.default_factory, items)
    return cls(items)


def _leaf_count_error(structure: Any, got: int) -> NestStructureError:
    return NestStructureError(
        f"pack_sequence_as: the structure has {len(flatten(structure))} leaves but the flat "
        f"sequence has {got} elements. Structure: {structure!r}")


_NO_LEAF = object()


def pack_sequence_as(structure: Any, flat_sequence: Sequence[Any]) -> Any:
    """Packs a flat sequence of leaves into the shape of ``structure``; undoes :func:`flatten`.

    Args:
        structure: the nest giving the shape (its leaves are ignored).
        flat_sequence: the leaves, in canonical order.

    Returns:
        A nest with the structure (and container types) of ``structure``.

    Raises:
        NestStructureError: if the number of leaves does not match ``structure``.
    """
    sync_kinds()
    flat = flat_sequence if type(flat_sequence) is list else list(flat_sequence)  # no copy
    kind = kind_of(structure)
    if kind == LEAF:
        if len(flat) != 1:
            raise _leaf_count_error(structure, len(flat))
        return flat[0]
    # Packing and counting in one walk; a wrong count is reported before any other failure.
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
            mismatch.reversed_path.append(index if a_kind == SEQUENCE else type(a)._fields[index])
            raise


def assert_same_structure(nest1: Any, nest2: Any, check_types: bool = True) -> None:
    """Asserts that two nests have the same structure (leaves are not compared).

    Args:
        nest1: the expected structure.
        nest2: the structure to check.
        check_types: whether sequence types must match exactly (any two mappings match).

    Raises:
        NestStructureError: a leaf against a container, or different lengths / keys.
        NestTypeError: different container types.
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
        NestStructureError: as :func:`assert_same_structure`.
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


def map_structure_with_path(fn: Callable[..., Any], *nests: Any, check_types: bool = True) -> Any:
    """Like :func:`map_structure` (same returns and raises) but calls ``fn(path, *leaves)``.

    Args:
        fn: called as ``fn(path, leaf_1, ..., leaf_n)``; ``path`` is the leaf's dotted
            path (``""`` when the nest is a single leaf).
        *nests, check_types: as :func:`map_structure`.
    """
    if not nests:
        raise ValueError("map_structure_with_path needs at least one nest, got none.")
    first = nests[0]
    for other in nests[1:]:
        assert_same_structure(first, other, check_types)
    others = [flatten(n) for n in nests[1:]]
    return pack_sequence_as(first, [fn(path, leaf, *rest) for (path, leaf), *rest
                                    in zip(flatten_with_path(first), *others)])


py_map_structure_with_path = map_structure_with_path  # ALF's name


def stack(nests: Sequence[Any]) -> Any:
    """Stacks same-structured nests of arrays (or tensors) along a new leading axis.

    Args:
        nests: a non-empty sequence of nests with identical structure.

    Returns:
        One nest whose leaves have an extra leading dimension ``len(nests)``.

    Raises:
        ValueError: if ``nests`` is empty or the structures differ.
    """
    if len(nests) == 0:
        raise ValueError("stack needs at least one nest, got an empty sequence.")

    # Not imported here: a worker that never uses torch does not pay ~1 s for it.
    torch = sys.modules.get("torch")

    def _stack(*leaves: Any) -> Any:
        if torch is not None and torch.is_tensor(leaves[0]):
            return torch.stack([torch.as_tensor(x) for x in leaves])
        return np.stack(leaves)

    return map_structure(_stack, *nests)


# -- compiled for one spec -----------------------------------------------------

class _Field(NamedTuple):
    """How :func:`compile_nest` moves one field of a namedtuple spec."""
    name: str
    sub: Any                    # the field's spec if it is a nest, else None (a leaf)
    num_leaves: int
    empty: Optional[type]       # the type of a bare empty container, rebuilt per value
    dict_order: Optional[Tuple[List[Any], List[int]]]


def _dict_order(spec: Any) -> Optional[Tuple[List[Any], List[int]]]:
    """A plain dict of leaves' keys and each one's ``flatten`` position (packed by one zip)."""
    if type(spec) is not dict or not spec or any(is_nested(v) for v in spec.values()):
        return None
    key_order = sorted_keys(spec)
    keys = list(spec)
    return keys, [key_order.index(k) for k in keys]


def _compile_dict(spec: Dict[Any, Any], dict_order: Tuple[List[Any], List[int]]
                  ) -> Tuple[Callable[[Any], List[Any]], Callable[[List[Any]], Any]]:
    """:func:`compile_nest` of a plain ``dict`` of leaves; other values go to :func:`flatten`."""
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
    """``(flatten, pack)`` for values shaped like ``spec``, faster than :func:`flatten` and
    :func:`pack_sequence_as`, for the hot paths that move values of one spec every step.
    Leaves that do not fit the spec are left for the caller to refuse."""
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
        # A bare empty field (``untransformed``, an info-less ``env_info``) is rebuilt by
        # its type: a new empty value each time, at a tenth of pack_sequence_as.
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
        # Every field a leaf or bare empty (the common TimeStep): no walk of the fields.
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
