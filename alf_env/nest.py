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

This module holds the walks over whole nests (flatten, pack, compare, map,
stack) and re-exports the rest of the nest vocabulary, so every nest function
is reached as ``alf_env.nest.<name>``: the node kinds (:func:`is_nested`,
:func:`is_namedtuple`) come from :mod:`alf_env.nest_kinds`, the paths
(:func:`flatten_with_path`) from :mod:`alf_env.nest_paths` and the errors from
:mod:`alf_env.nest_errors`.
"""

import collections
import sys
from typing import Any, Callable, Iterator, List, Sequence

import numpy as np

from alf_env.nest_errors import Mismatch, NestStructureError, NestTypeError
from alf_env.nest_kinds import (
    BUILTIN_KINDS,
    KINDS,
    LEAF,
    MAPPING,
    SEQUENCE,
    is_namedtuple,
    is_nested,
    kind_of,
    namedtuple_children,
    new_kind_of,
    sorted_keys,
    sync_kinds,
)
from alf_env.nest_paths import flatten_with_path

__all__ = [
    "NestStructureError",
    "NestTypeError",
    "is_namedtuple",
    "is_nested",
    "flatten",
    "flatten_with_path",
    "pack_sequence_as",
    "assert_same_structure",
    "map_structure",
    "map_structure_with_path",
    "py_map_structure_with_path",
    "stack",
]


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

    Returns:
        A nest with the structure of ``nests[0]`` holding ``fn``'s results.

    Raises:
        NestStructureError: if the nests' structures differ (a
            ``RuntimeError`` and a ``ValueError``; :class:`NestTypeError`,
            also a ``TypeError``, for different container types).
    """
    if not nests:
        raise ValueError("map_structure_with_path needs at least one nest, got none.")
    first = nests[0]
    for other in nests[1:]:
        assert_same_structure(first, other, check_types)
    paths_and_leaves = flatten_with_path(first)
    paths = [p for p, _ in paths_and_leaves]
    # The leaves of ``first`` come from the same walk as its paths.
    flats = [[leaf for _, leaf in paths_and_leaves]]
    flats += [flatten(n) for n in nests[1:]]
    return pack_sequence_as(
        first, [fn(p, *leaves) for p, leaves in zip(paths, zip(*flats))])


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
