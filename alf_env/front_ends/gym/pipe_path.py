"""``FastVectorEnv``'s pipe path: the envs step through pipe requests, results pickled.

As ``AsyncVectorEnv(shared_memory=False)`` does, where shared memory cannot serve or
is not wanted; the rest is the shared-memory path's (``docs/architecture.rst``,
"Front ends").
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
from gymnasium.error import CustomSpaceError
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from alf_env.data_plane.shared_block import JobType
from alf_env.front_ends.gym.gym_rows import SCALAR_FIELDS, EnvResult
from alf_env.front_ends.gym.info_codec import Payload
from alf_env.front_ends.gym.space_layout import Rows, SpaceLayout

__all__ = ["PipeLayout", "RowLayout", "PipeRows"]


class PipeLayout:
    """The pipe path's ``SpaceLayout``: one object per env, batched by gymnasium's
    ``concatenate`` (with ``copy=False`` into one array that the next step overwrites,
    as ``AsyncVectorEnv`` does) and split by its ``iterate``."""

    num_pipe_leaves = 0  # no sub-value travels apart: the whole value is on the pipe

    def __init__(self, space: gym.Space[Any], path: str, num_envs: int) -> None:
        self.space = space
        self.path = path
        self._num_envs = num_envs
        self._buffer: Any = None  # the batch of every env with copy=False
        self._batched: Dict[int, gym.Space[Any]] = {}

    def rows(self) -> List[np.ndarray]:
        """New (parent-side) rows: one object array of ``num_envs`` entries."""
        return [np.full(self._num_envs, None, dtype=object)]

    def write_row(self, views: Sequence[np.ndarray], row: int, value: Any) -> List[Any]:
        views[0][row] = value
        return []

    def read_row(self, views: Sequence[np.ndarray], row: int,
                 pipe_leaves: Sequence[Any] = ()) -> Any:
        return views[0][row]

    def encode_batch(self, values: Any, n: int, casting: str = "safe") -> List[List[Any]]:
        """Splits a batched value with ``iterate`` (``TypeError`` if it cannot iterate)."""
        batched = self._batched.get(n)
        if batched is None:
            batched = self._batched[n] = batch_space(self.space, n)
        try:
            items = list(iterate(batched, values))
        except TypeError as exc:  # not iterable at all, as iterate says
            raise TypeError(f"{self.path}: {exc}") from None
        except (ValueError, KeyError, IndexError, CustomSpaceError) as exc:
            raise ValueError(f"{self.path}: expected a batch of {n} values of {self.space} "
                             f"(as {batched}), got {type(values).__name__}: {exc}") from None
        if len(items) != n:
            raise ValueError(f"{self.path}: expected a batch of {n} values of {self.space}, "
                             f"got {len(items)}")
        return [items]

    @staticmethod
    def write_rows(views: Sequence[np.ndarray], rows: Rows, arrays: Sequence[List[Any]]) -> None:
        column = views[0]
        indices = range(*rows.indices(len(column))) if isinstance(rows, slice) else rows
        for row, item in zip(indices, arrays[0]):
            column[row] = item

    @staticmethod
    def exact_batch_writer(views: Sequence[Any], rows: slice,
                           n: int) -> Optional[Callable[[Any], bool]]:
        return None

    @staticmethod
    def batch_reader(views: Sequence[np.ndarray], rows: slice,
                     copy: bool) -> Optional[Callable[[], Any]]:
        return None

    def read_rows(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                  pipe_rows: Optional[Sequence[Sequence[Any]]] = None, copy: bool = True) -> Any:
        """The batch of ``row_list``, by gymnasium's ``concatenate``."""
        items = [views[0][row] for row in row_list]
        if copy or len(items) != self._num_envs:
            # None for a custom space, which concatenate takes (not in its annotation).
            out: Any = create_empty_array(self.space, len(items), fn=np.zeros)
            return concatenate(self.space, items, out)
        if self._buffer is None:
            self._buffer = create_empty_array(self.space, self._num_envs, fn=np.zeros)
        return concatenate(self.space, items, self._buffer)


#: How the values of one per-env space move between Python objects and rows.
RowLayout = Union[SpaceLayout, PipeLayout]


class PipeRows:
    """The parent's rows on the pipe path, a ``ResultRows`` (``report`` and ``info_layout``
    stay zero), the actions to send (``act``) and ``payloads``: each row's last info."""

    def __init__(self, observation: PipeLayout, action: RowLayout,
                 bounds: Sequence[Tuple[int, int]]) -> None:
        num_envs = bounds[-1][1]
        self._observation = observation
        self._action = action
        self._bounds = bounds
        self.payloads: Dict[int, Payload] = {}
        self.info: Optional[np.ndarray] = None  # no info area: every info is a payload
        self.obs = observation.rows()
        self.act = (action.rows() if isinstance(action, PipeLayout) else
                    action.views({name: np.zeros((num_envs, *shape), dtype)
                                  for name, shape, dtype in action.fields}))
        self.reward, self.terminated, self.truncated, self.report, self.info_layout = (
            np.zeros((num_envs, *shape), dtype) for _, shape, dtype in SCALAR_FIELDS)

    def actions_of(self, worker: int) -> List[Any]:
        """The actions of the envs of ``worker`` (what its STEP job sends)."""
        return [self._action.read_row(self.act, row) for row in range(*self._bounds[worker])]

    def store(self, worker: int, job: JobType, answer: List[Optional[EnvResult]]) -> None:
        """Keeps the results of a finished STEP or RESET job of ``worker``."""
        begin, end = self._bounds[worker]
        for row in range(begin, end):
            self.payloads.pop(row, None)
        for row, result in enumerate(answer, start=begin):
            if result is None:  # left alone by reset_mask
                continue
            obs, reward, terminated, truncated, info = result
            self._observation.write_row(self.obs, row, obs)
            self.reward[row] = reward
            self.terminated[row] = terminated
            self.truncated[row] = truncated
            if info:
                self.payloads[row] = info
