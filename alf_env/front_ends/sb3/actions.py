"""ActionRouter: SB3's per-env actions, through the shared rows or, as given, on the
pipe (SB3's vec envs send env ``i`` the item ``actions[i]`` as it is; docs/migration.rst)."""

from typing import Any, Dict, List, Mapping, Tuple

import numpy as np
from gymnasium import spaces

from alf_env.front_ends.gym.action_items import action_layout
from alf_env.front_ends.gym.space_layout import ARRAY_SPACES

__all__ = ["ActionRouter"]


class ActionRouter:
    """Splits SB3's actions into a batch for the shared rows and the passed ones."""

    def __init__(self, space: spaces.Space[Any], num_envs: int) -> None:
        self.space = space
        self.num_envs = num_envs
        # The vector env's own row checks, to find the actions they refuse.
        self._layout = action_layout(space)
        self._array = isinstance(space, ARRAY_SPACES)
        self._blank = _blank(space)

    def split(self, actions: Any) -> Tuple[Any, Dict[int, Any]]:
        """``(batch, passed)``: the vector env's batch (a blank action for each passed env) and
        ``{env: its action as given}``; ``ValueError`` or ``TypeError`` if not one per env."""
        n = self.num_envs
        space = self.space
        if (self._array and type(actions) is np.ndarray and actions.dtype == space.dtype
                and actions.shape == (n,) + (space.shape or ())):
            return actions, {}  # what SB3's algorithms pass: nothing to look at
        if isinstance(actions, Mapping):
            raise ValueError(f"actions: expected one action per env (a sequence of {n}), "
                             f"got a {type(actions).__name__}; SB3 takes a list of per-env "
                             f"actions, not gymnasium's batched layout")
        try:
            items = list(actions)
        except TypeError:
            raise TypeError(f"actions: expected one action per env (a sequence of {n}), "
                            f"got {type(actions).__name__}") from None
        if len(items) != n:
            raise ValueError(f"actions: expected one action per env ({n}), got {len(items)}")
        whole = self._carried(items, actions if self._array and isinstance(actions, np.ndarray)
                              else None)
        if whole is not None:
            return whole, {}
        passed = {i: item for i, item in enumerate(items) if self._carried([item]) is None}
        kept = [self._blank if i in passed else item for i, item in enumerate(items)]
        return _batched(space, kept), passed

    def _carried(self, items: List[Any], batch: Any = None) -> Any:
        """``batch`` (default: ``items`` in gymnasium's layout) if the rows carry
        these actions exactly, else ``None``."""
        try:
            if batch is None:
                batch = _batched(self.space, items)
            self._layout.encode_batch(batch, len(items), "same_kind")
        except (KeyError, IndexError, TypeError, ValueError):
            return None
        return batch


def _batched(space: spaces.Space[Any], items: List[Any]) -> Any:
    """Per-env actions in gymnasium's batched layout (raises if an item does not
    have the structure of ``space``)."""
    if isinstance(space, spaces.Dict):
        for item in items:
            if not isinstance(item, Mapping) or set(item) != set(space.spaces):
                raise KeyError(f"expected a dict with keys {list(space.spaces)}")
        return {key: _batched(sub, [item[key] for item in items])
                for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        for item in items:
            if isinstance(item, (str, bytes, Mapping)) or len(item) != len(space.spaces):
                raise ValueError(f"expected a sequence of {len(space.spaces)}")
        return tuple(_batched(sub, [item[j] for item in items])
                     for j, sub in enumerate(space.spaces))
    return list(items)


def _blank(space: spaces.Space[Any]) -> Any:
    """An action the rows carry, for an env whose own action goes on the pipe."""
    if isinstance(space, spaces.Dict):
        return {key: _blank(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_blank(sub) for sub in space.spaces)
    if isinstance(space, ARRAY_SPACES):
        return np.zeros(space.shape, space.dtype)
    return space.sample()
