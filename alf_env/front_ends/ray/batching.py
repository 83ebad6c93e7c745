"""Splitting a batch over actors and joining the actors' batches, space by space, as
``gymnasium.vector.utils.batch_space`` batches them (other spaces: a tuple of items)."""

import itertools
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
from gymnasium import spaces

_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def split_batch(space: spaces.Space[Any], batch: Any, bounds: Sequence[Tuple[int, int]],
                path: str = "actions") -> List[Any]:
    """Cuts a batch of ``space`` items into the slices ``[lo, hi)`` of ``bounds``
    (``ValueError`` naming a leaf that does not fit)."""
    n = bounds[-1][1]
    if isinstance(space, spaces.Dict):
        if not isinstance(batch, dict) or set(batch) != set(space.spaces):
            got = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
            raise ValueError(f"{path}: expected a dict with keys {sorted(space.spaces)}, "
                             f"got {got}")
        parts = {k: split_batch(s, batch[k], bounds, f"{path}[{k!r}]")
                 for k, s in space.spaces.items()}
        return [{k: parts[k][i] for k in space.spaces} for i in range(len(bounds))]
    if isinstance(space, spaces.Tuple):
        if not isinstance(batch, (tuple, list)) or len(batch) != len(space.spaces):
            raise ValueError(f"{path}: expected a tuple of {len(space.spaces)} batches, "
                             f"got {type(batch).__name__}")
        pieces = [split_batch(s, b, bounds, f"{path}[{i}]")
                  for i, (s, b) in enumerate(zip(space.spaces, batch))]
        return [tuple(p[i] for p in pieces) for i in range(len(bounds))]
    if isinstance(space, _ARRAY_SPACES):
        batch = np.asarray(batch)
        if batch.ndim == 0 or batch.shape[0] != n:
            raise ValueError(f"{path}: expected a batch of {n} (shape ({n}, "
                             f"{', '.join(map(str, space.shape or ()))}) and dtype {space.dtype}), "
                             f"got shape {batch.shape}")
        return [batch[lo:hi] for lo, hi in bounds]
    batch = tuple(batch)
    if len(batch) != n:
        raise ValueError(f"{path}: expected a batch of {n} items, got {len(batch)}")
    return [batch[lo:hi] for lo, hi in bounds]


def concat_batches(space: spaces.Space[Any], parts: Sequence[Any]) -> Any:
    """Joins batches of ``space`` items (the inverse of :func:`split_batch`) into
    new, writable arrays."""
    if isinstance(space, spaces.Dict):
        return {k: concat_batches(s, [p[k] for p in parts]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(concat_batches(s, [p[i] for p in parts]) for i, s in enumerate(space.spaces))
    if isinstance(space, _ARRAY_SPACES):
        return np.concatenate(parts, axis=0)
    return tuple(itertools.chain.from_iterable(parts))


def merge_infos(parts: Sequence[Tuple[Dict[str, Any], int]], n: int) -> Dict[str, Any]:
    """Merges the ``(infos, offset)`` of consecutive slices into what ``SyncVectorEnv`` gives
    for all ``n`` envs (a key's dtype is its first one's; the others keep 0, False or None)."""
    merged: Dict[str, Any] = {}
    for infos, offset in parts:
        _merge_into(merged, infos, offset, n)
    return merged


def _merge_into(merged: Dict[str, Any], infos: Dict[str, Any], offset: int, n: int) -> None:
    for key, value in infos.items():
        if isinstance(value, dict):
            _merge_into(merged.setdefault(key, {}), value, offset, n)
            continue
        value = np.asarray(value)
        array = merged.get(key)
        if array is None:
            shape = (n, *value.shape[1:])
            array = (np.full(shape, None, dtype=object) if value.dtype == object
                     else np.zeros(shape, dtype=value.dtype))
            merged[key] = array
        array[offset:offset + len(value)] = value
