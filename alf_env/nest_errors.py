"""The errors of :mod:`alf_env.nest` and their messages.

Structure mismatches raise :class:`NestStructureError` (a leaf against a
container, different lengths or keys) or :class:`NestTypeError` (different
container types); :class:`Mismatch` carries a difference found deep in a
walk up to the public function, which turns it into one of them with a
message naming the path where the nests differ and what was expected vs got.
"""

import collections.abc
from typing import Any, List, Type

from alf_env.nest_kinds import is_nested, sorted_keys
from alf_env.nest_paths import join_path

__all__ = ["Mismatch", "NestStructureError", "NestTypeError"]


class NestStructureError(RuntimeError, ValueError):
    """Two nests differ in structure (a leaf against a container, lengths, keys).

    Both ``RuntimeError`` (ALF's nest functions raise that) and ``ValueError``
    (what this module raised before), so callers of either kind catch it.
    """


class NestTypeError(NestStructureError, TypeError):
    """Two nests have different container types (e.g. a list against a tuple).

    A :class:`NestStructureError` (so also ``RuntimeError`` and ``ValueError``)
    and a ``TypeError`` (what this module raised before for this case).
    """


def _describe_path(path: str) -> str:
    return f"path '{path}'" if path else "the root"


def _type_name(value: Any) -> str:
    return type(value).__name__


def _describe(value: Any) -> str:
    """A short description of a node, for error messages."""
    if isinstance(value, collections.abc.Mapping):
        return f"{_type_name(value)} with keys {sorted_keys(value)}"
    if is_nested(value):
        return f"{_type_name(value)} of length {len(value)}"
    return f"leaf of type {_type_name(value)}"


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
        where = _describe_path(path)
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
