"""Flatten and pack compiled for one spec: the hot paths' fast ``nest``.

``nest.flatten`` and ``nest.pack_sequence_as`` inspect every node of a value
on every call. A worker or a trainer that moves values of one spec every step
(a ``TimeStep``, an action) compiles the spec once with :func:`compile_nest`
and gets the same leaves and the same packed values for a fraction of that.
"""

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from alf_env import nest
from alf_env.nest_kinds import sorted_keys

__all__ = ["compile_nest"]


class _Field(NamedTuple):
    """How :func:`compile_nest` moves one field of a namedtuple spec."""
    name: str
    sub: Any                    # the field's spec if it is a nest, else None (a leaf)
    num_leaves: int             # its number of leaves
    empty: Optional[type]       # the type of a bare empty container, rebuilt per value
    dict_order: Optional[Tuple[List[Any], List[int]]]  # see _dict_order


def _dict_order(spec: Any) -> Optional[Tuple[List[Any], List[int]]]:
    """For a plain ``dict`` of leaves (an ``env_info`` spec): its keys in its own
    order and, for each, the position of its leaf in ``nest.flatten`` order
    (sorted keys), so that packing is one ``dict(zip(...))`` with what
    ``nest.pack_sequence_as`` gives; ``None`` for anything else."""
    if type(spec) is not dict or not spec or any(nest.is_nested(v) for v in spec.values()):
        return None
    key_order = sorted_keys(spec)
    keys = list(spec)
    return keys, [key_order.index(k) for k in keys]


def _compile_dict(spec: Dict[Any, Any], dict_order: Tuple[List[Any], List[int]]
                  ) -> Tuple[Callable[[Any], List[Any]], Callable[[List[Any]], Any]]:
    """:func:`compile_nest` of a plain ``dict`` of leaves (see :func:`_dict_order`).

    A plain dict with the spec's keys and no nest where the spec has a leaf is
    read key by key in ``nest.flatten`` order; anything else is flattened by
    ``nest`` itself.
    """
    keys, positions = dict_order
    key_order = sorted_keys(spec)

    def flatten(value: Any) -> List[Any]:
        if type(value) is dict and len(value) == len(key_order):
            try:
                leaves = [value[k] for k in key_order]
            except KeyError:  # other keys: nest names the mismatch
                return nest.flatten(value)
            if not any(isinstance(leaf, (list, tuple, dict)) for leaf in leaves):
                return leaves
        return nest.flatten(value)

    def pack(leaves: List[Any]) -> Any:
        return dict(zip(keys, [leaves[p] for p in positions]))

    return flatten, pack


def compile_nest(spec: Any) -> Tuple[Callable[[Any], List[Any]], Callable[[List[Any]], Any]]:
    """``(flatten, pack)`` for values shaped like ``spec``, faster than ``nest``'s.

    A namedtuple spec (a ``TimeStep``) is taken apart field by field: a leaf
    field directly, a nested field by ``nest`` (a plain dict of leaves is
    packed by key). A plain dict spec of leaves (an ``env_info``, a dict
    observation) is read and built by key. A value of another type, or
    with a nest where the spec has a leaf, is flattened by ``nest`` itself;
    a nested field the spec has empty but the value has not is kept whole.
    Either way leaves that do not fit the spec (their count, shapes or
    dtypes) are left for the caller to refuse (e.g. the pipe path's
    ``LeafCodec.encode_exact``) and name.
    """
    if not nest.is_nested(spec):
        return (lambda value: [value]), (lambda leaves: leaves[0])
    if not nest.is_namedtuple(spec):
        dict_order = _dict_order(spec)
        if dict_order is not None:
            return _compile_dict(spec, dict_order)
        return nest.flatten, lambda leaves: nest.pack_sequence_as(spec, leaves)
    fields = []
    for name, sub in zip(spec._fields, spec):
        nested = nest.is_nested(sub)
        count = len(nest.flatten(sub)) if nested else 1
        # A field that is a bare empty tuple, list or dict (a TimeStep's
        # ``untransformed`` and an info-less ``env_info``) is rebuilt by its
        # type: a new empty value each time, at a tenth of pack_sequence_as.
        empty = type(sub) if type(sub) in (tuple, list, dict) and not sub else None
        fields.append(_Field(name, sub if nested else None, count, empty,
                             _dict_order(sub) if nested and empty is None else None))
    cls = type(spec)

    def flatten(value: Any) -> List[Any]:
        if type(value) is not cls:
            return nest.flatten(value)
        out: List[Any] = []
        for field_spec in fields:
            field = getattr(value, field_spec.name)
            if field_spec.sub is None:
                if isinstance(field, (list, tuple, dict)):
                    return nest.flatten(value)  # a nest where the spec has a leaf
                out.append(field)
            elif field_spec.num_leaves:
                out.extend(nest.flatten(field))
            elif field:  # the spec has none here: keep it, to be refused
                out.append(field)
        return out

    def pack(leaves: List[Any]) -> Any:
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
                values.append(nest.pack_sequence_as(sub, leaves[i:i + count]))
            i += count
        return cls(*values)

    return flatten, pack
