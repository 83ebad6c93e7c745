"""The node kinds of nests, for :mod:`alf_env.nest`.

What a node of a nest is (a leaf, a sequence, a namedtuple or a mapping),
asked once per type and cached (:func:`kind_of`, compared with :data:`LEAF`,
:data:`SEQUENCE`, :data:`MAPPING`...); :func:`is_nested` and :func:`is_namedtuple`;
the children of namedtuple nodes and the sorted keys of mapping nodes. The
functions of :mod:`alf_env.nest`, :mod:`alf_env.nest_paths` and
:mod:`alf_env.nest_errors` walk nests with these.
"""

import abc
import collections.abc
from typing import Any, Dict, List

__all__ = [
    "BUILTIN_KINDS", "KINDS", "LEAF", "MAPPING", "NAMEDTUPLE", "NAMEDTUPLE_PLAIN", "SEQUENCE",
    "is_namedtuple", "is_nested", "kind_of", "namedtuple_children", "new_kind_of", "sorted_keys",
    "sync_kinds",
]

# Every public function of the nest modules walks nests node by node, and at each node needs
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
