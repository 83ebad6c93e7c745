"""The job engine of ``FastVectorEnv``: posting STEP and RESET jobs and collecting them.

Both modes post jobs to whole workers through the
:class:`~alf_env.data_plane.job_board.JobBoard` and track the workers *in
flight* (a STEP or RESET posted, its result not yet returned). The
synchronous mode waits for all of them (:meth:`JobEngine._wait_all`); the
asynchronous (EnvPool) mode returns the first ``batch_size`` envs to finish
(:meth:`JobEngine._receive`, behind ``recv()``), with ``info["env_id"]`` of
dtype :data:`ENV_ID_DTYPE`, while the others keep stepping. The unit of
asynchrony is a worker: ``send`` takes whole workers (all ``envs_per_worker``
envs of each; :meth:`JobEngine._check_ids`).

A dead worker breaks the env (``_broken``: every later call but ``close()``
raises its ``WorkerDiedError``); any other error but a timeout ends the
pending call; a timeout keeps it, so waiting again picks it up.
"""

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
from absl import logging
from gymnasium.error import NoAsyncCallError
from gymnasium.vector import AutoresetMode

from alf_env.control_plane.channel import resolve_all
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.data_plane.shared_block import JobType
from alf_env.errors import EnvTimeoutError, WorkerDiedError
from alf_env.front_ends.gym.gym_rows import RESERVED_CALL_NAMES
from alf_env.front_ends.gym.info_codec import InfoDecoder, Payload
from alf_env.front_ends.gym.space_layout import Rows
from alf_env.front_ends.gym.state import AsyncState

__all__ = ["ENV_ID_DTYPE", "JobEngine"]

#: dtype of ``info["env_id"]`` in the asynchronous mode (EnvPool's).
ENV_ID_DTYPE = np.int32


class JobEngine:
    """Posts jobs, tracks the workers in flight and waits for them (a mixin of
    ``FastVectorEnv``).

    It reads the env's ``_board``, ``_bounds``, ``_row_worker``, ``_act``,
    ``_act_views``, ``_obs``, ``_obs_views``, the scalar rows, ``_info_decoder``,
    ``num_envs``, ``batch_size``, ``envs_per_worker`` and ``autoreset_mode``,
    and keeps ``_in_flight`` (the workers with an unreceived STEP/RESET),
    ``_last_received`` (the env ids, rows and workers of the last ``recv()``),
    ``_needs_reset`` (in the DISABLED mode),
    ``_state`` and ``_broken`` up to date. :meth:`call_envs` also reads
    ``_workers`` and runs the state checks of ``StateChecks``.
    """

    _board: Any  # a JobBoard, or a PipeBoard on the pipe path (None once closed)
    _bounds: List[Tuple[int, int]]
    _row_worker: np.ndarray
    _act: Any  # a SpaceLayout, or a PipeLayout on the pipe path
    _act_views: Any  # the action rows (EnvRows.act or PipeRows.act)
    _obs: Any  # as _act, for the observations
    _obs_views: Any
    _reward: np.ndarray
    _terminated: np.ndarray
    _truncated: np.ndarray
    _info_decoder: InfoDecoder
    num_envs: int
    batch_size: int
    envs_per_worker: Optional[int]
    autoreset_mode: AutoresetMode
    _all_ids: np.ndarray
    _all_rows: slice
    _all_workers: List[int]
    _in_flight: Set[int]
    _last_received: Optional[Tuple[np.ndarray, Any, List[int]]]
    _needs_reset: np.ndarray
    _state: AsyncState
    _broken: Optional[BaseException]
    _workers: List[ProcessEnvironment]
    # Of the other mixins (StateChecks, ResultAssembly).
    _assert_is_running: Callable[[], None]
    _assert_state: Callable[[str], None]
    _payloads_of: Callable[[List[int]], Dict[int, Payload]]
    _pipe_rows: Callable[[List[int]], Optional[List[List[Any]]]]

    def _guard(self, fn: Callable[[], Any]) -> Any:
        """Runs a post or a wait: a dead worker breaks the env; any other error
        but a timeout (after which waiting again picks the call up) ends the call."""
        try:
            return fn()
        except WorkerDiedError as exc:
            self._broken = exc
            self._state = AsyncState.DEFAULT
            raise
        except EnvTimeoutError:
            raise
        except BaseException:
            self._state = AsyncState.DEFAULT
            raise

    def _post(self, workers: Sequence[int], job: Any, arg: int) -> None:
        self._guard(lambda: self._board.post(workers, job, arg))
        self._in_flight.update(workers)

    def _settle(self) -> None:
        """Lets the jobs in flight finish (their results stay for recv()).

        Needed before a pipe request: the doorbell must find the worker idle,
        or it would wait for the job itself and could raise the job's error
        with the request already on the pipe.
        """
        if self._in_flight:
            workers = sorted(self._in_flight)
            self._guard(lambda: self._board.wait_for(workers, "finishing jobs in flight",
                                                     raise_errors=False))

    def _send(self, actions: Any, env_ids: Optional[Any],
              received: Optional[Tuple[Any, List[int]]] = None) -> None:
        """Checks ids and actions, writes the actions, posts STEP to their workers.

        ``env_ids=None`` means every env (the synchronous step).
        ``received``: ``(rows, workers)`` of ``env_ids`` when they are the ids
        of the last recv() (checked then): only whether they are idle is checked.
        """
        rows: Rows
        if env_ids is None:
            ids, rows, workers = self._all_ids, self._all_rows, self._all_workers
        elif received is not None:
            ids = env_ids
            rows, workers = received
            self._check_idle(workers)
        else:
            ids = rows = self._check_ids(env_ids)
            workers = sorted(set(self._row_worker[ids].tolist()))
        self._write_actions(actions, ids, rows)
        self._post(workers, JobType.STEP, 0)

    def _write_actions(self, actions: Any, ids: np.ndarray, rows: Any) -> None:
        """Checks ``actions`` (one per env of ``ids``) and writes them to ``rows``."""
        arrays = self._act.encode_batch(actions, len(ids), "same_kind")
        if self.autoreset_mode is AutoresetMode.DISABLED and self._needs_reset[ids].any():
            ended = ids[self._needs_reset[ids]].tolist()
            raise AssertionError(
                f"envs {ended} ended (terminated or truncated) and autoreset_mode is "
                f"DISABLED: reset them first, e.g. reset(options={{'reset_mask': mask}})")
        self._act.write_rows(self._act_views, rows, arrays)

    def _step_all(self, actions: Any) -> None:
        """Writes the actions of every env, steps them all and waits (synchronous ``step``).

        ``step_async`` + ``step_wait`` in one call, for the hot path; the
        state stays DEFAULT throughout (the board has no timeout, and an
        interrupted wait leaves the jobs outstanding on the board, which
        finishes them before it posts again).
        """
        self._write_actions(actions, self._all_ids, self._all_rows)
        self._guard(lambda: self._board.run(self._all_workers, JobType.STEP, 0, "step"))

    def _check_ids(self, env_ids: Any) -> np.ndarray:
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"env_ids: expected a 1-d sequence of ints, got "
                             f"{np.asarray(env_ids).dtype} of shape {ids.shape}")
        ids = ids.astype(np.int64)
        if ids.size == 0:
            raise ValueError("env_ids: expected at least one env id")
        bad = ids[(ids < 0) | (ids >= self.num_envs)]
        if bad.size:
            raise ValueError(f"env_ids: expected ids in [0, {self.num_envs}), got "
                             f"{bad.tolist()}")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_ids: each env may be listed once, got {ids.tolist()}")
        e = self.envs_per_worker
        if e is None:
            sizes = "/".join(str(stop - start) for start, stop in self._bounds)
            raise ValueError(f"env_ids: stepping some of the envs needs workers of one "
                             f"size; these {self.num_envs} envs are spread {sizes} over "
                             f"{len(self._bounds)} workers (pass envs_per_worker, or a "
                             f"num_workers that divides the number of envs)")
        workers = set(self._row_worker[ids].tolist())
        if len(workers) * e != ids.size:
            raise ValueError(f"env_ids: with envs_per_worker={e} a worker is stepped "
                             f"whole; list all envs of each worker, got {ids.tolist()}")
        self._check_idle(workers)
        return ids

    def _check_idle(self, workers: Iterable[int]) -> None:
        busy = sorted(self._bounds[w][0] for w in workers if w in self._in_flight)
        if busy:
            raise ValueError(f"env_ids: envs {busy} are still in flight (sent, not yet "
                             f"received); recv() them first")

    def _wait_all(self, during: str, timeout: Optional[float]) -> None:
        """Waits for every in-flight worker (synchronous mode)."""
        workers = sorted(self._in_flight)
        try:
            self._guard(lambda: self._board.wait_for(workers, during, timeout))
        except EnvTimeoutError:
            raise
        except BaseException:
            self._in_flight.clear()  # every job finished (or the env is broken)
            raise
        self._in_flight.clear()
        self._state = AsyncState.DEFAULT

    def _drain_in_flight(self) -> None:
        """Finishes jobs still in flight, dropping their results (before a reset)."""
        if not self._in_flight:
            return
        workers = sorted(self._in_flight)
        self._in_flight.clear()
        try:
            self._guard(lambda: self._board.wait_for(workers, "finishing earlier jobs"))
        except WorkerDiedError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the reset is the recovery
            logging.warning("FastVectorEnv: a job in flight before the reset raised %r; "
                            "dropped", exc)

    def _receive(self, timeout: Optional[float]
                 ) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The first ``batch_size`` envs in flight to finish (the EnvPool recv)."""
        e = self.envs_per_worker
        assert e is not None  # the asynchronous mode has workers of equal size
        k = self.batch_size // e
        if len(self._in_flight) < k:
            self._state = AsyncState.DEFAULT
            raise NoAsyncCallError(
                f"recv() returns {self.batch_size} envs, but only "
                f"{len(self._in_flight) * e} are in flight; send() or async_reset() first",
                "recv")
        workers = self._guard(lambda: self._board.wait_first(self._in_flight, k, "recv",
                                                             timeout))
        self._state = AsyncState.DEFAULT
        errors = self._board.pop_errors(workers)
        if errors:
            self._in_flight.difference_update(errors)
            error = next(iter(errors.values()))
            if isinstance(error, WorkerDiedError):
                self._broken = error
            raise error
        self._in_flight.difference_update(workers)
        bounds = self._bounds
        row_list = [i for w in workers for i in range(*bounds[w])]
        ids = np.asarray(row_list, dtype=np.int64)
        if all(bounds[a][1] == bounds[b][0] for a, b in zip(workers, workers[1:])):
            # Rows back to back (e.g. one worker's): a slice reads them faster,
            # and the info decoder remembers the slices it has seen.
            rows: Any = slice(row_list[0], row_list[-1] + 1)
            terminated, truncated = self._terminated[rows].copy(), self._truncated[rows].copy()
            reward = self._reward[rows].copy()
        else:
            rows = ids
            terminated, truncated, reward = (self._terminated[ids], self._truncated[ids],
                                             self._reward[ids])
        obs = self._obs.read_rows(self._obs_views, rows, row_list, self._pipe_rows(row_list))
        infos = self._info_decoder.batch(rows, row_list, self._payloads_of(row_list))
        infos["env_id"] = ids.astype(ENV_ID_DTYPE)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._needs_reset[rows] = terminated | truncated
        self._last_received = (ids, rows, list(workers))
        return obs, reward, terminated, truncated, infos

    def _resolve(self, promises: List[Any], timeout: Optional[float],
                 during: str = "a call") -> List[Any]:
        """Waits for every promise together (``resolve_all``); a dead worker breaks the env."""
        try:
            return resolve_all(promises, timeout, during)
        except WorkerDiedError as exc:
            self._broken = exc
            raise

    def call_envs(self, name: str, calls: Mapping[int, Tuple[tuple, dict]]) -> Dict[int, Any]:
        """Calls method ``name`` (or reads the attribute) of some envs, each with
        its own arguments.

        Unlike :meth:`call`, which sends every worker the same request, only
        the workers that host the envs of ``calls`` get one, holding only
        their envs' arguments (so a large argument for one env crosses one pipe).

        Args:
            name: as for ``call``.
            calls: ``{env_id: (args, kwargs)}``.

        Returns:
            ``{env_id: what env_id's call returned}``.

        Raises:
            ValueError: an env id out of ``[0, num_envs)``, or ``step``,
                ``reset`` or ``close`` as ``name``; nothing was sent.
        """
        self._assert_is_running()
        bad = sorted(i for i in calls if not 0 <= i < self.num_envs)
        if bad:
            raise ValueError(f"call_envs({name!r}): expected env ids in [0, {self.num_envs}), "
                             f"got {bad}")
        if name in RESERVED_CALL_NAMES:
            raise ValueError(f"call_envs({name!r}): use {type(self).__name__}.{name}() instead")
        self._assert_state("call_envs")
        self._settle()
        by_worker: Dict[int, Dict[int, Tuple[tuple, dict]]] = {}
        for env_id, call in calls.items():
            w = int(self._row_worker[env_id])
            by_worker.setdefault(w, {})[env_id - self._bounds[w][0]] = call
        workers = sorted(by_worker)
        answers = self._resolve(self._guard(lambda: [
            self._workers[w].call("call_some", name, by_worker[w]) for w in workers]), None)
        return {self._bounds[w][0] + k: value
                for w, answer in zip(workers, answers) for k, value in answer.items()}
