"""How envs are placed on actors: consecutive shares of the env ids (docs/distributed.rst)."""

from typing import List, Optional, Sequence

import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode


def plan_shares(num_envs: int, num_actors: int, batch_size: int,
                autoreset_mode: Optional[AutoresetMode]) -> List[range]:
    """Consecutive shares of the env ids, one per actor, sizes differing by at most one (equal
    in the asynchronous mode, whose unit is an actor); ``ValueError`` for bad arguments."""
    if num_envs == 0:
        raise ValueError("env_fns: expected at least one env constructor, got none")
    if not 1 <= int(num_actors) <= num_envs:
        raise ValueError(f"num_actors: expected 1 <= num_actors <= {num_envs} (the number "
                         f"of envs), got {num_actors}")
    if not 1 <= batch_size <= num_envs:
        raise ValueError(f"batch_size: expected 1 <= batch_size <= {num_envs} (the number "
                         f"of envs), got {batch_size}")
    bounds = np.linspace(0, num_envs, int(num_actors) + 1).round().astype(int)
    shares = [range(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    if batch_size < num_envs:
        share = num_envs // int(num_actors)
        if num_envs % int(num_actors) or batch_size % share:
            raise ValueError(
                f"batch_size: the asynchronous mode returns whole actors, so num_envs "
                f"({num_envs}) must be a multiple of num_actors ({num_actors}) and "
                f"batch_size a multiple of the envs per actor ({num_envs / num_actors:g}); "
                f"got batch_size={batch_size}")
        if autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError("autoreset_mode: the asynchronous mode (batch_size < num_envs) "
                             "resets envs on its own; use NEXT_STEP or SAME_STEP, not DISABLED")
    return shares


def actors_of(env_ids: npt.ArrayLike, shares: Sequence[range], busy: Sequence[int]) -> List[int]:
    """The actors whose envs ``env_ids`` lists, for ``send`` (``ValueError`` for ids out
    of range, not whole actors in order, or of actors in flight)."""
    ids = np.asarray(env_ids)
    num_envs, share = shares[-1].stop, len(shares[0])
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"env_ids: expected a non-empty 1-d sequence of ints, got "
                         f"{ids.dtype} of shape {ids.shape}")
    bad = ids[(ids < 0) | (ids >= num_envs)]
    if bad.size:
        raise ValueError(f"env_ids: expected ids in [0, {num_envs}), got {bad.tolist()}")
    actors: List[int] = []
    for start in range(0, ids.size, share):
        j = int(ids[start]) // share
        expected = np.arange(shares[j].start, shares[j].stop)
        chunk = ids[start:start + share]
        if chunk.shape != expected.shape or (chunk != expected).any() or j in actors:
            raise ValueError(f"env_ids: the unit of asynchrony is an actor of {share} "
                             f"envs; list each actor's envs whole and in order (e.g. "
                             f"{expected.tolist()}), got {ids.tolist()}")
        actors.append(j)
    in_flight = [shares[j].start for j in actors if j in busy]
    if in_flight:
        raise ValueError(f"env_ids: envs {in_flight} are still in flight (sent, not yet "
                         f"received); recv() them first")
    return actors
