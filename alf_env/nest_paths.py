"""Dotted paths of the leaves of nests, for :mod:`alf_env.nest`.

A path names a leaf inside a nest by joining the keys, indices or field
names on the way down with ``"."``, e.g. ``"observation.0"`` or
``"env_info.speed"``; the path of a nest that is itself a leaf is ``""``.
"""

from typing import Any, List, Tuple

from alf_env.nest_kinds import LEAF, MAPPING, SEQUENCE, kind_of, sorted_keys, sync_kinds

__all__ = ["flatten_with_path", "join_path"]

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
