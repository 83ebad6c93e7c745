"""``FastVectorEnv``'s pipe path: the envs step through pipe requests, results pickled.

Used where shared memory cannot serve (an action space with a sub-space of
no fixed size: Graph, Sequence, custom spaces) or is not wanted
(``shared_memory=False``). Like ``AsyncVectorEnv(shared_memory=False)``:

* each STEP or RESET is one pipe request per worker (the
  :class:`~alf_env.front_ends.gym.pipe_board.PipeBoard`) to its
  :class:`~alf_env.front_ends.gym.gym_rows.GymEnvBatch`, answered with every
  env's ``(obs, reward, terminated, truncated, info)``, pickled;
* observations are batched by gymnasium's own
  ``gymnasium.vector.utils.concatenate`` into ``create_empty_array``
  (:class:`PipeLayout`), infos by gymnasium's algorithm
  (:class:`~alf_env.front_ends.gym.info_codec.InfoDecoder` with every info a
  pipe payload), and actions of no fixed size are split with ``iterate``.

Everything else is the shared-memory path's: the same envs, autoreset rule
(:class:`~alf_env.front_ends.gym.gym_rows.Autoreset`), engine and API, so
states, timeouts, errors naming the env, the asynchronous (EnvPool) mode,
``call`` / ``get_attr`` / ``set_attr`` and ``close`` behave the same.
Fixed-size actions are still checked against ``single_action_space``
(``SpaceLayout.encode_batch``) before anything is sent.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
from gymnasium.error import CustomSpaceError
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from alf_env.data_plane.shared_block import JobType
from alf_env.front_ends.gym.gym_rows import EnvResult
from alf_env.front_ends.gym.info_codec import Payload
from alf_env.front_ends.gym.space_layout import Rows, SpaceLayout

__all__ = ["PipeLayout", "PipeRows"]


class PipeLayout:
    """The values of one space kept whole, one object per env, batched by gymnasium.

    The pipe path's stand-in for
    :class:`~alf_env.front_ends.gym.space_layout.SpaceLayout` (the methods the
    engine and the results call): the *rows* are one object array with an
    entry per env; a batch is ``concatenate(space, items,
    create_empty_array(space, n))``, as ``AsyncVectorEnv(shared_memory=False)``
    makes it (with ``copy=False``, into one array that the next step
    overwrites, as there); a batched value is split with ``iterate``.

    Args:
        space: the per-env space.
        path: the name of the value in error messages (e.g. ``"action"``).
        num_envs: envs of the vector env.
    """

    #: No sub-value travels apart: the whole value is on the pipe.
    num_pipe_leaves = 0

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
        """Keeps ``value`` as the entry of ``row`` (nothing travels apart)."""
        views[0][row] = value
        return []

    def read_row(self, views: Sequence[np.ndarray], row: int,
                 pipe_leaves: Sequence[Any] = ()) -> Any:
        """The entry of ``row``."""
        return views[0][row]

    def encode_batch(self, values: Any, n: int, casting: str = "safe") -> List[List[Any]]:
        """Splits a batched value into its ``n`` per-env values (``iterate``).

        Raises:
            ValueError: ``values`` is not a batch of ``n`` values of the space.
            TypeError: ``values`` cannot be iterated (as ``iterate`` raises).
        """
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
    def write_rows(views: Sequence[np.ndarray], rows: Rows,
                   arrays: Sequence[List[Any]]) -> None:
        """Keeps what :meth:`encode_batch` returned as the entries of ``rows``."""
        column = views[0]
        indices = range(*rows.indices(len(column))) if isinstance(rows, slice) else rows
        for row, item in zip(indices, arrays[0]):
            column[row] = item

    @staticmethod
    def exact_batch_writer(views: Sequence[Any], rows: slice,
                           n: int) -> Optional[Callable[[Any], bool]]:
        """None: every batch is split by :meth:`encode_batch`."""
        return None

    @staticmethod
    def batch_reader(views: Sequence[np.ndarray], rows: slice,
                     copy: bool) -> Optional[Callable[[], Any]]:
        """None: every batch is made by :meth:`read_rows`."""
        return None

    def read_rows(self, views: Sequence[np.ndarray], rows: Rows, row_list: List[int],
                  pipe_rows: Optional[Sequence[Sequence[Any]]] = None,
                  copy: bool = True) -> Any:
        """The batch of ``row_list``, by gymnasium's ``concatenate``."""
        items = [views[0][row] for row in row_list]
        if copy or len(items) != self._num_envs:
            # None for a custom space, which concatenate takes (not in its annotation).
            out: Any = create_empty_array(self.space, len(items), fn=np.zeros)
            return concatenate(self.space, items, out)
        if self._buffer is None:
            self._buffer = create_empty_array(self.space, self._num_envs, fn=np.zeros)
        return concatenate(self.space, items, self._buffer)


class PipeRows:
    """The parent's rows on the pipe path: the actions to send, and what the
    answers said, per env, until the engine reads them (as it reads shared rows).

    Its attributes are :class:`~alf_env.front_ends.gym.results.ResultRows`'
    (``report`` and ``info_layout`` stay zero: no info area), ``act`` (the rows
    of ``action``: a ``SpaceLayout`` when the action space has a fixed size,
    so actions are checked as on the shared-memory path) and ``payloads``:
    ``{row: info}`` of the last answers (every info of this path is a pipe payload).
    """

    def __init__(self, observation: PipeLayout, action: Union[SpaceLayout, PipeLayout],
                 bounds: Sequence[Tuple[int, int]]) -> None:
        num_envs = bounds[-1][1]
        self._observation = observation
        self._action = action
        self._bounds = bounds
        self.payloads: Dict[int, Payload] = {}
        self.obs = observation.rows()
        self.act = (action.rows() if isinstance(action, PipeLayout) else
                    action.views({name: np.zeros((num_envs, *shape), dtype)
                                  for name, shape, dtype in action.fields}))
        self.reward = np.zeros(num_envs, np.float64)
        self.terminated = np.zeros(num_envs, np.bool_)
        self.truncated = np.zeros(num_envs, np.bool_)
        self.report = np.zeros(num_envs, np.bool_)
        self.info_layout = np.zeros(num_envs, np.int32)

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
