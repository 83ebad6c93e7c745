"""Info dicts through shared memory: the info codec of :class:`~alf_env.vector.FastVectorEnv`.

Real envs fill their info dict every step (MuJoCo's ``x_position``, ALE's ``lives``)
and the pipe costs a message per worker per step, so the fixed-size part goes through a
per-env area of the shared block. Each worker learns *layouts* from what its envs
return, numbers them ``1, 2, ...`` (0: the whole info on the pipe) and sends a new
one home once; what does not fit goes on the pipe (``docs/shared_memory.rst``,
"Layout"; ``docs/contract.rst``). The batched info is exactly ``SyncVectorEnv``'s:
envs of one layout with no pipe values are batched with one copy per key, unless a
key is another's mask name (``x`` and ``_x``: gymnasium's result then depends on the
order of its writes); any other batch by :func:`add_info`, gymnasium's algorithm.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from absl import logging

from alf_env.front_ends.gym.info_layout import InfoLayout, Signature, signature_of

__all__ = ["DEFAULT_INFO_BYTES", "MAX_LAYOUTS", "Payload", "InfoEncoder", "InfoDecoder", "add_info"]

#: Default size of each env's info area in the shared block, in bytes.
DEFAULT_INFO_BYTES = 512
#: Most layouts one worker learns; infos of further shapes travel on the pipe.
MAX_LAYOUTS = 64

#: What a worker sends home for one env's info: ``None`` (nothing), a dict
#: (the whole info, layout 0) or a list (the pipe values of its layout).
Payload = Union[None, Dict[Any, Any], List[Any]]


class InfoEncoder:
    """The worker side: packs each env's info into its row of the info area (``capacity``
    bytes; 0: every info on the pipe), ``declared`` signatures known from the start."""

    def __init__(self, capacity: int, num_envs: int, declared: Sequence[Signature] = ()) -> None:
        self.capacity = capacity
        self._by_signature: Dict[Signature, int] = {}
        self._layouts = [InfoLayout((), 0)]  # layout id 0: the info cannot be packed
        # Per env, the layout of its last packed info and its id (the fast check).
        self._cache: List[Tuple[Optional[InfoLayout], int]] = [(None, 0)] * num_envs
        self._records: Dict[int, np.ndarray] = {}
        self._warned = False
        for signature in declared:  # layout ids 1, 2, ... (the parent numbers them alike)
            self._learn(signature)

    def _learn(self, signature: Signature) -> int:
        """The id of ``signature``'s layout, learning it if new (0: it cannot be packed)."""
        lid = self._by_signature.get(signature)
        if lid is not None:
            return lid
        layout = InfoLayout(signature, self.capacity)
        if not layout.fits or len(self._layouts) > MAX_LAYOUTS:
            if layout.fits and not self._warned:
                self._warned = True
                logging.warning("alf_env: more than %d info layouts in one worker; infos "
                                "of new shapes now travel on the pipe", MAX_LAYOUTS)
            self._by_signature[signature] = 0
            return 0
        lid = len(self._layouts)
        self._layouts.append(layout)
        self._by_signature[signature] = lid
        return lid

    def cached_record(self, k: int, info: Dict[Any, Any]
                      ) -> Optional[Tuple[int, InfoLayout, Tuple[Any, ...]]]:
        """``(layout id, layout, record values)`` when env ``k``'s ``info`` has its last
        layout and no pipe values (the common step; the caller stores it), else ``None``."""
        layout, lid = self._cache[k]
        if layout is None or layout.pipe:
            return None
        values = tuple(info.values())
        if not layout.matches(tuple(info), values):
            return None
        return lid, layout, layout.record_values(values)

    def record_rows(self, lid: int, info_view: Optional[np.ndarray]) -> np.ndarray:
        """Every row of ``info_view`` (the ``info`` field) as a record of layout ``lid``."""
        records = self._records.get(lid)
        if records is None:
            dtype = self._layouts[lid].dtype
            assert dtype is not None and info_view is not None  # lid > 0: a layout that fits
            records = self._records[lid] = info_view.view(dtype)[:, 0]
        return records

    def encode(self, k: int, info: Dict[Any, Any], info_view: Optional[np.ndarray], row: int,
               new_layouts: List[Tuple[int, Signature]]) -> Tuple[int, Payload]:
        """Packs the ``info`` of the worker's env ``k`` into row ``row`` of ``info_view``;
        a layout learned now is appended to ``new_layouts``, to go home. Returns
        ``(layout id, payload)``: the ``info_layout`` row's id and what goes on the pipe."""
        if not info:
            return 0, None
        if self.capacity <= 0:
            return 0, info
        keys = tuple(info)
        values = list(info.values())
        layout, lid = self._cache[k]
        if layout is None or not layout.matches(keys, values):
            signature = signature_of(info)
            known = signature in self._by_signature
            lid = self._learn(signature)
            if not lid:
                self._cache[k] = (None, 0)
                return 0, info
            layout = self._layouts[lid]
            self._cache[k] = (layout, lid)
            if not known:
                new_layouts.append((lid, signature))
        records = self.record_rows(lid, info_view)
        try:
            records[row] = layout.record_values(values)
        except (OverflowError, ValueError, TypeError):
            return 0, info  # e.g. an int beyond int64
        return lid, layout.pipe_values(values)


class InfoDecoder:
    """The parent side: batches the infos of a step from the info area and the reports
    (``info_view`` and ``layout_view``: the block's ``info`` and ``info_layout`` fields)."""

    def __init__(self, info_view: np.ndarray, layout_view: np.ndarray,
                 row_worker: np.ndarray, num_workers: int) -> None:
        self._info = info_view
        self._lid = layout_view
        self._row_worker = row_worker
        self._capacity = info_view.shape[1] if info_view.ndim == 2 else 0
        # gid 0: no layout. _table[w, lid] is the global id of worker w's layout lid.
        self._table = np.zeros((num_workers, MAX_LAYOUTS + 2), dtype=np.int32)
        self._gids: Dict[Signature, int] = {}
        self._layouts = [InfoLayout((), 0)]  # gid 0: no info (an empty layout)
        self._records: List[np.ndarray] = [np.empty(0, np.uint8)]  # and no records
        self._pure: List[bool] = [False]  # layout without pipe values
        # Per layout, its fixed-size keys grouped by (dtype, shape):
        # [(dtype, shape, [(key, field name)], view or None)] (see _batch_shared).
        self._groups: List[List[Tuple[Any, ...]]] = [[]]
        # Per layout, (key, mask key) in the layout's key order, and all-True
        # masks by batch size (copied for each batch, see _batch_shared).
        self._key_pairs: List[List[Tuple[Any, str]]] = [[]]
        self._true_masks: List[Dict[int, np.ndarray]] = [{}]
        # (slice, info_layout bytes) -> the one pure layout of all its envs, or 0
        # for none. Not for mixed rows: their combinations are unbounded.
        self._whole_batch: Dict[Tuple[Any, ...], int] = {}

    def register(self, worker: int, lid: int, signature: Signature) -> None:
        """Learns that worker ``worker`` numbers ``signature`` as ``lid``."""
        gid = self._gids.get(signature)
        if gid is None:
            layout = InfoLayout(signature, self._capacity)
            # Workers register only layouts that fit: a structured dtype.
            assert layout.dtype is not None and layout.dtype.fields is not None
            self._gids[signature] = gid = len(self._layouts)
            self._layouts.append(layout)
            self._records.append(self._info.view(layout.dtype)[:, 0])
            keys = set(layout.keys)  # ``x`` and ``_x``: add_info's (module docstring)
            self._pure.append(not layout.pipe
                              and not any(f"_{key}" in keys for key in layout.keys))
            groups: Dict[Tuple[np.dtype, Tuple[int, ...]], List[Tuple[Any, str]]] = {}
            for _, key, name, kind in layout.shm:
                groups.setdefault((np.dtype(kind[1]), kind[2]), []).append((key, name))
            self._groups.append([(d, shape, fields, self._group_view(layout.dtype.fields, d,
                                                                     shape, fields))
                                 for (d, shape), fields in groups.items()])
            self._key_pairs.append([(key, f"_{key}") for _, key, _, _ in layout.shm])
            self._true_masks.append({})
        self._table[worker, lid] = gid
        self._whole_batch.clear()

    def _group_view(self, record_fields: Mapping[str, Tuple[Any, ...]], dtype: np.dtype,
                    shape: Tuple[int, ...], fields: List[Tuple[Any, str]]) -> Optional[np.ndarray]:
        """A ``(rows, len(fields), *shape)`` view of the fields of one group when
        they lie back to back in the info area (one copy reads them all), else ``None``."""
        size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        offsets = [record_fields[name][1] for _, name in fields]
        start = offsets[0]
        if offsets != [start + j * size for j in range(len(fields))] or start % dtype.alignment:
            return None
        area = self._info[:, start:start + len(fields) * size]
        return area.view(dtype).reshape((area.shape[0], len(fields)) + tuple(shape))

    def _shared_layout(self, rows: Union[slice, np.ndarray], lids: np.ndarray) -> int:
        """The global id of the one pure layout all envs of ``rows`` share, 0 if none has
        an info, -1 otherwise (a shared layout remembered for a slice)."""
        seen = None
        if isinstance(rows, slice):
            ids = lids.tobytes()
            if not ids.strip(b"\0"):
                return 0  # no env has an info: answered faster than remembered
            seen = (rows.start, rows.stop, rows.step, ids)
            known = self._whole_batch.get(seen)
            if known is not None:
                return known
        gid = 0
        if lids.any():
            gids = self._table[self._row_worker[rows], lids]
            gid = int(gids[0])
            gid = gid if gid and self._pure[gid] and (gids == gid).all() else -1
        if seen is not None and gid >= 0:
            self._whole_batch[seen] = gid
        return gid

    def _batch_shared(self, gid: int, rows: Union[slice, np.ndarray], n: int) -> Dict[str, Any]:
        """The batched info of ``n`` envs of pure layout ``gid``: the keys of one (dtype,
        shape), and the masks, are the rows of one new array each (fewer allocations)."""
        keys = self._key_pairs[gid]
        ones = self._true_masks[gid].get(n)
        if ones is None:
            ones = self._true_masks[gid][n] = np.ones((len(keys), n), dtype=np.bool_)
        masks = ones.copy()
        records = None
        columns: Dict[Any, np.ndarray] = {}
        for dtype, shape, fields, view in self._groups[gid]:
            if view is not None:  # back to back: one copy, key-major
                # .copy(), not np.ascontiguousarray: a view of one row is
                # contiguous already, and would be returned as is.
                block = view[rows].swapaxes(0, 1).copy()
                for i, (key, _) in enumerate(fields):
                    columns[key] = block[i]
                continue
            if records is None:
                records = self._records[gid][rows]
            block = np.empty((len(fields), n) + shape, dtype)
            for i, (key, name) in enumerate(fields):
                block[i] = records[name]
                columns[key] = block[i]
        infos: Dict[str, Any] = {}
        for (key, mask_key), mask in zip(keys, masks):
            infos[key] = columns[key]
            infos[mask_key] = mask
        return infos

    def each(self, rows: Union[slice, np.ndarray], row_list: List[int],
             payloads: Dict[int, Payload],
             include: Optional[Sequence[int]] = None) -> List[Dict[Any, Any]]:
        """Each env's own info dict, a new one, as the env returned it (keys, order, values,
        types); ``{}`` for no info or a row left out of ``include`` (default: all).
        ``row_list``: ``rows`` (a slice or an index array) as ints."""
        if not payloads and include is None:
            # The common steps: no env has an info, or all share one pure layout.
            gid = self._shared_layout(rows, self._lid[rows])
            if gid == 0:
                return [{} for _ in row_list]
            if gid > 0:
                return self._layouts[gid].decode_rows(self._records[gid][rows])
        return [dict(info) if info else {}
                for info in self._decoded(rows, row_list, payloads, include)]

    def _decoded(self, rows: Union[slice, np.ndarray], row_list: List[int],
                 payloads: Dict[int, Payload],
                 include: Optional[Sequence[int]]) -> List[Optional[Dict[Any, Any]]]:
        """Each row's info, one by one: decoded from its layout's record and pipe
        values, or its payload (the whole info); ``None``: none, or not included."""
        gids = self._table[self._row_worker[rows], self._lid[rows]].tolist()
        included = None if include is None else set(include)
        infos: List[Optional[Dict[Any, Any]]] = []
        for row, gid in zip(row_list, gids):
            payload = payloads.get(row)
            if included is not None and row not in included:
                infos.append(None)
            elif gid and not isinstance(payload, dict):  # a layout's payload: its pipe values
                infos.append(self._layouts[gid].decode(self._records[gid][row], payload))
            else:  # no layout: the whole info, if any
                infos.append(payload if isinstance(payload, dict) else None)
        return infos

    def batch(self, rows: Union[slice, np.ndarray], row_list: List[int],
              payloads: Dict[int, Payload],
              include: Optional[Sequence[int]] = None) -> Dict[str, Any]:
        """The batched info of ``rows``; the arguments are :meth:`each`'s."""
        n = len(row_list)
        infos: Dict[str, Any] = {}
        lids = self._lid[rows]
        if not payloads and include is None:
            # The common steps: no env has an info, or all share one pure layout.
            gid = self._shared_layout(rows, lids)
            if gid == 0:
                return infos
            if gid > 0:
                return self._batch_shared(gid, rows, n)
        elif not payloads and not lids.any():
            return infos  # no env returned an info
        for position, info in enumerate(self._decoded(rows, row_list, payloads, include)):
            if info:
                add_info(infos, info, position, n)
        return infos


def add_info(infos: Dict[str, Any], info: Dict[str, Any], index: int, n: int) -> Dict[str, Any]:
    """Adds one env's ``info`` to the batched ``infos`` at ``index`` (of ``n``), as
    gymnasium's ``VectorEnv._add_info`` does (``final_obs``: an object array)."""
    for key, value in info.items():
        if key == "final_obs":
            array = infos[key] if key in infos else np.full(n, None, dtype=object)
            array[index] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, index, n)
        else:
            array = infos[key] if key in infos else _empty_info_array(value, n)
            array[index] = value
        # .get, as gymnasium reads it (the error is gymnasium's when infos is no dict).
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[index] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


def _empty_info_array(value: Any, n: int) -> np.ndarray:
    """The batched array for an info value first seen as ``value``."""
    if type(value) in (int, float, bool) or isinstance(value, np.number):
        return np.zeros(n, dtype=type(value))
    if isinstance(value, np.ndarray):
        return np.zeros((n, *value.shape), dtype=value.dtype)
    return np.full(n, None, dtype=object)
