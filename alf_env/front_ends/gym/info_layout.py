"""What an info dict's layout is: signatures and layouts, for the info codec.

A *signature* is an info dict's keys in order, each with a *kind*: the value's exact
type, dtype and shape when it has a fixed size (a Python or numpy number, a numeric
array, under a str key), else :data:`PIPE`. An :class:`InfoLayout` places a signature
in an env's info area.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["PIPE", "Kind", "Signature", "signature_of", "InfoLayout"]

#: The kind of an info value that travels on the pipe.
PIPE = "pipe"

# The key gymnasium batches into an object array whatever its value.
_OBJECT_KEYS = frozenset(["final_obs"])
# Python scalar types and the dtype gymnasium's batched array gets for them.
_PY_DTYPES = {int: np.dtype(np.int64), float: np.dtype(np.float64), bool: np.dtype(np.bool_)}
_NUMERIC_KINDS = frozenset("biufc")

Kind = Union[str, Tuple[type, str, Tuple[int, ...]]]
Signature = Tuple[Tuple[Any, Kind], ...]


def _kind(key: Any, value: Any) -> Kind:
    """The kind of one info value (see the module docstring; numpy bools: :data:`PIPE`)."""
    if key in _OBJECT_KEYS or not isinstance(key, str):
        return PIPE
    t = type(value)
    dtype = _PY_DTYPES.get(t)
    if dtype is not None:
        return (t, dtype.str, ())
    if isinstance(value, np.number):
        return (t, value.dtype.str, ())
    if t is np.ndarray and value.dtype.kind in _NUMERIC_KINDS:
        return (t, value.dtype.str, value.shape)
    return PIPE


def signature_of(info: Dict[Any, Any]) -> Signature:
    """The signature of an info dict: ``((key, kind), ...)`` in the dict's order."""
    return tuple((key, _kind(key, value)) for key, value in info.items())


class InfoLayout:
    """A signature placed in an env's info area: ``dtype`` has a field ``f<i>`` for each
    fixed-size key ``i`` (``shm``: ``[(position, key, field name, kind)]``), ``pipe``
    the positions of the others; ``fits``: the ``nbytes`` fit, and there is one."""

    def __init__(self, signature: Signature, capacity: int) -> None:
        self.keys = tuple(key for key, _ in signature)
        self.shm: List[Tuple[int, Any, str, Tuple[type, str, Tuple[int, ...]]]] = []
        self.pipe: List[int] = []
        names, formats, offsets, offset = [], [], [], 0
        for i, (key, kind) in enumerate(signature):
            if isinstance(kind, str):  # PIPE
                self.pipe.append(i)
                continue
            _, dtype_str, shape = kind
            field_dtype = np.dtype((np.dtype(dtype_str), shape))
            align = np.dtype(dtype_str).alignment
            offset = (offset + align - 1) // align * align
            name = f"f{i}"
            names.append(name)
            formats.append(field_dtype)
            offsets.append(offset)
            offset += field_dtype.itemsize
            self.shm.append((i, key, name, kind))
        self.nbytes = offset
        self.fits = offset <= capacity and bool(self.shm)
        self.dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                               "itemsize": max(capacity, 1)}) if self.fits else None
        self._shm_positions = [i for i, _, _, _ in self.shm]
        # Every value in shared memory, in key order: the values are the record.
        self._all_shm = self._shm_positions == list(range(len(self.keys)))
        self._array_checks = [(i, np.dtype(kind[1]), kind[2]) for i, _, _, kind in self.shm
                              if kind[0] is np.ndarray]
        self._types = tuple(kind[0] if kind != PIPE else None for _, kind in signature)
        # Scalars only (no arrays, no pipe values): the types say it all.
        self._scalars_only = not self.pipe and not self._array_checks

    def matches(self, keys: Tuple[Any, ...], values: Sequence[Any]) -> bool:
        if keys != self.keys:
            return False
        if self._scalars_only:
            return tuple(map(type, values)) == self._types
        for value, t in zip(values, self._types):
            if t is not None and type(value) is not t:
                return False
        for i, dtype, shape in self._array_checks:
            value = values[i]
            if value.dtype != dtype or value.shape != shape:
                return False
        for i in self.pipe:  # a pipe value that became fixed-size changes the layout
            if _kind(keys[i], values[i]) != PIPE:
                return False
        return True

    def record_values(self, values: Sequence[Any]) -> Tuple[Any, ...]:
        """The fixed-size values, in field order."""
        if self._all_shm:
            return tuple(values)
        return tuple(values[i] for i in self._shm_positions)

    def pipe_values(self, values: Sequence[Any]) -> Optional[List[Any]]:
        """The pipe values (``None`` if the layout has none)."""
        return [values[i] for i in self.pipe] if self.pipe else None

    def decode(self, record: Any, pipe_values: Optional[List[Any]]) -> Dict[Any, Any]:
        """One env's info from its record (an ``np.void``) and its pipe values."""
        if self._scalars_only:
            return dict(zip(self.keys, map(_as_type, self._types, record.item())))
        values: List[Any] = [None] * len(self.keys)
        for i, _, name, kind in self.shm:
            t = kind[0]
            value = record[name]
            # int/float/bool and numpy scalar types convert back to themselves
            values[i] = np.array(value) if t is np.ndarray else t(value)
        if self.pipe:
            for i, value in zip(self.pipe, pipe_values or ()):
                values[i] = value
        return dict(zip(self.keys, values))

    def decode_rows(self, records: np.ndarray) -> List[Dict[Any, Any]]:
        """The infos (new dicts) of ``records`` of this layout with no pipe values."""
        if self._scalars_only:  # one tolist() reads them all
            keys, types = self.keys, self._types
            return [dict(zip(keys, map(_as_type, types, values))) for values in records.tolist()]
        return [self.decode(record, None) for record in records]


def _as_type(t: Any, value: Any) -> Any:
    """``value``, read from a record, as the type ``t`` it was written as."""
    return t(value)
