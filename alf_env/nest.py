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

Structure mismatches raise ``ValueError`` (a leaf against a container,
different lengths or keys) or ``TypeError`` (different container types); the
message names the path where the nests differ and what was expected vs got.
"""

import collections.abc
from typing import Any, Callable, Iterator, List, Sequence, Tuple

import numpy as np
import torch

__all__ = [
    "is_namedtuple",
    "is_nested",
    "flatten",
    "flatten_with_path",
    "pack_sequence_as",
    "assert_same_structure",
    "map_structure",
    "map_structure_with_path",
    "stack",
]

_PATH_SEPARATOR = "."


def is_namedtuple(value: Any) -> bool:
    """Whether ``value`` is an instance of a namedtuple type."""
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def is_nested(value: Any) -> bool:
    """Whether ``value`` is a container (tuple, list, namedtuple or mapping)."""
    return isinstance(value, (tuple, list, collections.abc.Mapping))


def _sorted_keys(mapping: collections.abc.Mapping) -> List[Any]:
    """Keys of ``mapping`` in sorted order (by ``str`` for unorderable mixes)."""
    try:
        return sorted(mapping)
    except TypeError:
        return sorted(mapping, key=lambda k: (type(k).__name__, str(k)))


def _children(nest: Any) -> List[Tuple[Any, Any]]:
    """The ``(key, child)`` pairs of a container, in canonical order."""
    if isinstance(nest, collections.abc.Mapping):
        return [(k, nest[k]) for k in _sorted_keys(nest)]
    if is_namedtuple(nest):
        return list(zip(type(nest)._fields, nest))
    return list(enumerate(nest))


def _join(path: str, key: Any) -> str:
    return f"{path}{_PATH_SEPARATOR}{key}" if path else str(key)


def _describe_path(path: str) -> str:
    return f"path '{path}'" if path else "the root"


def _type_name(value: Any) -> str:
    return type(value).__name__


def _describe(value: Any) -> str:
    """A short description of a node, for error messages."""
    if isinstance(value, collections.abc.Mapping):
        return f"{_type_name(value)} with keys {_sorted_keys(value)}"
    if is_nested(value):
        return f"{_type_name(value)} of length {len(value)}"
    return f"leaf of type {_type_name(value)}"


def _flatten_into(nest: Any, out: List[Any]) -> None:
    if is_nested(nest):
        for _, child in _children(nest):
            _flatten_into(child, out)
    else:
        out.append(nest)


def flatten(nest: Any) -> List[Any]:
    """Returns the leaves of ``nest`` as a flat list, in canonical order.

    Args:
        nest: a nest or a single leaf.

    Returns:
        The leaves; ``[nest]`` if ``nest`` is itself a leaf, ``[]`` for an empty
        container.
    """
    out: List[Any] = []
    _flatten_into(nest, out)
    return out


def _flatten_with_path_into(nest: Any, path: str,
                            out: List[Tuple[str, Any]]) -> None:
    if is_nested(nest):
        for key, child in _children(nest):
            _flatten_with_path_into(child, _join(path, key), out)
    else:
        out.append((path, nest))


def flatten_with_path(nest: Any) -> List[Tuple[str, Any]]:
    """Returns ``(path, leaf)`` pairs of ``nest``, in the order of :func:`flatten`.

    Args:
        nest: a nest or a single leaf.

    Returns:
        A list of ``(dotted_path, leaf)``; the root leaf's path is ``""``.
    """
    out: List[Tuple[str, Any]] = []
    _flatten_with_path_into(nest, "", out)
    return out


def _rebuild(structure: Any, values: List[Any]) -> Any:
    """Builds a container of ``structure``'s type from canonical-order values."""
    if isinstance(structure, collections.abc.Mapping):
        by_key = dict(zip(_sorted_keys(structure), values))
        # Keep the structure's own key order (it matters to OrderedDict).
        items = [(k, by_key[k]) for k in structure]
        if isinstance(structure, collections.defaultdict):
            return type(structure)(structure.default_factory, items)
        return type(structure)(items)
    if is_namedtuple(structure):
        return type(structure)(*values)
    return type(structure)(values)


def _pack(structure: Any, leaves: Iterator[Any]) -> Any:
    if not is_nested(structure):
        return next(leaves)
    values = [_pack(child, leaves) for _, child in _children(structure)]
    return _rebuild(structure, values)


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
        ValueError: if the number of leaves does not match ``structure``.
    """
    flat_sequence = list(flat_sequence)
    expected = len(flatten(structure))
    if expected != len(flat_sequence):
        raise ValueError(
            f"pack_sequence_as: the structure has {expected} leaves but the "
            f"flat sequence has {len(flat_sequence)} elements. "
            f"Structure: {structure!r}")
    return _pack(structure, iter(flat_sequence))


def _assert_same_structure(a: Any, b: Any, path: str, check_types: bool) -> None:
    a_nested, b_nested = is_nested(a), is_nested(b)
    if a_nested != b_nested:
        raise ValueError(
            f"The two nests differ at {_describe_path(path)}: expected "
            f"{_describe(a)}, got {_describe(b)}.")
    if not a_nested:
        return
    a_map = isinstance(a, collections.abc.Mapping)
    b_map = isinstance(b, collections.abc.Mapping)
    if a_map != b_map or (check_types and not a_map and type(a) is not type(b)):
        raise TypeError(
            f"The two nests differ at {_describe_path(path)}: expected "
            f"{_describe(a)}, got {_describe(b)}.")
    if a_map:
        a_keys, b_keys = _sorted_keys(a), _sorted_keys(b)
        if a_keys != b_keys:
            missing = [k for k in a_keys if k not in b]
            extra = [k for k in b_keys if k not in a]
            raise ValueError(
                f"The two nests differ at {_describe_path(path)}: expected "
                f"keys {a_keys}, got keys {b_keys} (missing {missing}, "
                f"unexpected {extra}).")
        for k in a_keys:
            _assert_same_structure(a[k], b[k], _join(path, k), check_types)
        return
    if len(a) != len(b):
        raise ValueError(
            f"The two nests differ at {_describe_path(path)}: expected "
            f"{_describe(a)}, got {_describe(b)}.")
    for (key, a_child), (_, b_child) in zip(_children(a), _children(b)):
        _assert_same_structure(a_child, b_child, _join(path, key), check_types)


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
        ValueError: a leaf against a container, or different lengths / keys.
        TypeError: different container types.
        The message names the path where the nests differ and gives the
        expected and actual node.
    """
    _assert_same_structure(nest1, nest2, "", check_types)


def map_structure(fn: Callable[..., Any], *nests: Any, check_types: bool = True) -> Any:
    """Applies ``fn`` to the corresponding leaves of ``nests``.

    Args:
        fn: called as ``fn(leaf_1, ..., leaf_n)`` for each leaf position.
        *nests: one or more nests with the same structure.
        check_types: see :func:`assert_same_structure`.

    Returns:
        A nest with the structure of ``nests[0]`` holding ``fn``'s results.

    Raises:
        ValueError, TypeError: if the nests' structures differ.
    """
    if not nests:
        raise ValueError("map_structure needs at least one nest, got none.")
    first = nests[0]
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

    Returns:
        A nest with the structure of ``nests[0]`` holding ``fn``'s results.

    Raises:
        ValueError, TypeError: if the nests' structures differ.
    """
    if not nests:
        raise ValueError("map_structure_with_path needs at least one nest, got none.")
    first = nests[0]
    for other in nests[1:]:
        assert_same_structure(first, other, check_types)
    paths = [p for p, _ in flatten_with_path(first)]
    flats = [flatten(n) for n in nests]
    return pack_sequence_as(
        first, [fn(p, *leaves) for p, leaves in zip(paths, zip(*flats))])


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

    def _stack(*leaves: Any) -> Any:
        if torch.is_tensor(leaves[0]):
            return torch.stack([torch.as_tensor(x) for x in leaves])
        return np.stack(leaves)

    return map_structure(_stack, *nests)
