"""The node kinds of nests, for :mod:`alf_env.nest`.

What a node of a nest is (a leaf, a sequence, a namedtuple or a mapping),
asked once per type and cached; :func:`is_nested` and :func:`is_namedtuple`;
the children of namedtuple nodes and the sorted keys of mapping nodes. The
functions of :mod:`alf_env.nest`, :mod:`alf_env.nest_paths` and
:mod:`alf_env.nest_errors` walk nests with these.
"""

import abc
import collections.abc
from typing import Any, Dict, List

__all__ = ["is_namedtuple", "is_nested"]

# Every public function of the nest modules walks nests node by node, and at each node needs
# the answer of ``is_nested`` / ``isinstance(x, Mapping)`` / ``is_namedtuple``.
# Asking ``isinstance`` against ``collections.abc.Mapping`` (an ABC check) at
# every node dominated the per-step cost of the environments. So the answer
# is computed once per *type* with exactly those predicates and kept in
# ``_KINDS``:
#
# * ``_LEAF``: not a tuple, list or Mapping;
# * ``_SEQUENCE``: a list (or subclass), or a tuple (sub)class without
#   ``_fields``: children in iteration order (what ``enumerate`` gives);
# * ``_NAMEDTUPLE``: a tuple subclass with ``_fields``: children are
#   ``zip(type(x)._fields, x)``;
# * ``_NAMEDTUPLE_PLAIN``: the same, for a class that keeps ``tuple.__iter__``,
#   so iterating it directly gives the same children as the ``zip`` whenever
#   ``_fields`` is at least as long as the tuple (checked per node);
# * ``_MAPPING``: a ``collections.abc.Mapping``: children in sorted key order.
#
# Why caching per type is exact: ``isinstance(x, tuple/list)`` depends only on
# the type's bases, and ``isinstance(x, Mapping)`` on the bases and on ABC
# registrations; every registration bumps ``abc.get_cache_token()``, and the
# cache is dropped whenever that token changed (checked once per public call).
# Types that override ``__class__`` (proxies, mocks) can make ``isinstance``
# answer per instance, so they are never cached. What is assumed is only what
# ``abc`` itself assumes: a class does not change its bases, gain or lose
# ``_fields`` or swap ``__iter__`` after it has been used in a nest.
_LEAF = 0
_SEQUENCE = 1
_NAMEDTUPLE = 2
_NAMEDTUPLE_PLAIN = 3
_MAPPING = 4

# Builtin containers: their answers can never change (builtins cannot be
# re-based, and ``dict`` is a Mapping by a registration that cannot be undone).
_BUILTIN_KINDS: Dict[type, int] = {tuple: _SEQUENCE, list: _SEQUENCE, dict: _MAPPING}
_KINDS: Dict[type, int] = dict(_BUILTIN_KINDS)
# A bound on the cache, so code that creates classes on the fly (namedtuples
# made per call) cannot make it grow without limit; refilling is cheap.
_MAX_CACHED_KINDS = 4096
_get_cache_token = abc.get_cache_token
_kinds_token = _get_cache_token()
_Mapping = collections.abc.Mapping


def _sync_kinds() -> None:
    """Drops the kind cache if an ABC registration happened since it was filled."""
    global _kinds_token
    token = _get_cache_token()
    if token != _kinds_token:
        _KINDS.clear()
        _KINDS.update(_BUILTIN_KINDS)
        _kinds_token = token


def _lies_about_class(cls: type) -> bool:
    """Whether instances of ``cls`` may report a ``__class__`` other than ``cls``."""
    return any("__class__" in vars(base) for base in cls.__mro__[:-1])


def _new_kind(value: Any) -> int:
    """The kind of ``value`` from the original predicates; caches it if safe."""
    cls = type(value)
    if isinstance(value, _Mapping):
        kind = _MAPPING
    elif isinstance(value, tuple) and hasattr(cls, "_fields"):
        kind = (_NAMEDTUPLE_PLAIN if issubclass(cls, tuple) and cls.__iter__ is tuple.__iter__
                else _NAMEDTUPLE)
    elif isinstance(value, (tuple, list)):
        kind = _SEQUENCE
    else:
        kind = _LEAF
    if not _lies_about_class(cls):
        if len(_KINDS) >= _MAX_CACHED_KINDS:
            _KINDS.clear()
            _KINDS.update(_BUILTIN_KINDS)
        _KINDS[cls] = kind
    return kind


def _kind(value: Any) -> int:
    """The cached kind of ``value`` (see above)."""
    kind = _KINDS.get(type(value))
    if kind is None:
        return _new_kind(value)
    return kind


def _namedtuple_children(value: Any, kind: int) -> Any:
    """The children of a namedtuple node: what ``zip(_fields, value)`` yields."""
    fields = type(value)._fields
    # For a class keeping tuple.__iter__, the zip yields every element exactly
    # when _fields is at least as long as the tuple itself.
    if (kind == _NAMEDTUPLE_PLAIN and type(fields) is tuple
            and len(fields) >= tuple.__len__(value)):
        return value
    return [child for _, child in zip(fields, value)]


def is_namedtuple(value: Any) -> bool:
    """Whether ``value`` is an instance of a namedtuple type."""
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def is_nested(value: Any) -> bool:
    """Whether ``value`` is a container (tuple, list, namedtuple or mapping)."""
    _sync_kinds()
    return _kind(value) != _LEAF


def _sorted_keys(mapping: collections.abc.Mapping) -> List[Any]:
    """Keys of ``mapping`` in sorted order (by ``str`` for unorderable mixes)."""
    try:
        return sorted(mapping)
    except TypeError:
        return sorted(mapping, key=lambda k: (type(k).__name__, str(k)))
