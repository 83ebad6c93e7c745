"""The job engine of ``FastVectorEnv``: posting STEP and RESET jobs and collecting them.

Jobs go to whole workers, so the unit of asynchrony is a worker: ``send`` takes
all the envs of each. Both modes, call by call: ``docs/architecture.rst`` ("One
step of FastVectorEnv").
"""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import numpy.typing as npt
from absl import logging
from gymnasium.error import NoAsyncCallError

from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.data_plane.job_board import Board
from alf_env.data_plane.shared_block import JobType
from alf_env.errors import EnvTimeoutError, WorkerDiedError
from alf_env.front_ends.gym.gym_rows import RESET_DEFAULT, RESET_STAGED, EnvCall, StagedReset
from alf_env.front_ends.gym.results import worker_of_rows
from alf_env.front_ends.gym.space_layout import Rows
from alf_env.front_ends.gym.startup import Transport
from alf_env.front_ends.gym.state import AsyncState, CallState, Step

__all__ = ["JobEngine"]


class JobEngine:
    """Posts jobs to the workers, tracks those in flight and waits for them; ``calls``'
    pending call ends, or the env breaks, as the jobs say (``CallState.guard``)."""

    def __init__(self, calls: CallState, transport: Transport,
                 workers: Sequence[ProcessEnvironment], bounds: Sequence[Tuple[int, int]],
                 batch_size: int, envs_per_worker: Optional[int]) -> None:
        self._calls = calls
        self._board: Optional[Board] = transport.board  # None once closed
        self._workers = workers
        self._bounds = bounds
        self._batch_size = batch_size
        self._envs_per_worker = envs_per_worker  # None: workers of different sizes
        self._act, self._act_views = transport.action, transport.action_views
        self._results = transport.results
        self._num_envs = bounds[-1][1]
        self._row_worker = worker_of_rows(bounds)
        self._all_ids = np.arange(self._num_envs)
        self._all_rows = slice(0, self._num_envs)
        self._all_workers = list(range(len(bounds)))
        # step_all's shortcut for a batch of exactly the action space's dtype and
        # shape (not under DISABLED autoreset, whose ended envs refuse a step).
        self._write_exact = None if self._results.refuses_ended else self._act.exact_batch_writer(
            self._act_views, self._all_rows, self._num_envs)
        #: The workers with an unreceived STEP/RESET.
        self.in_flight: Set[int] = set()
        #: The env ids, rows and workers of the last ``recv()`` (None before the first).
        self.last_received: Optional[Tuple[np.ndarray, Rows, List[int]]] = None

    @property
    def board(self) -> Board:
        assert self._board is not None, "the engine was closed"
        return self._board

    def post(self, workers: Sequence[int], job: JobType, arg: int) -> None:
        """Posts ``job`` to ``workers``; they are in flight until received."""
        self._calls.guard(lambda: self.board.post(workers, job, arg))
        self.in_flight.update(workers)

    def settle(self) -> None:
        """Lets the jobs in flight finish (their results stay for recv()): a pipe
        request needs an idle worker, or its doorbell would wait for the job and
        could raise the job's error with the request already on the pipe."""
        if self.in_flight:
            workers = sorted(self.in_flight)
            self._calls.guard(lambda: self.board.wait_for(
                workers, "finishing jobs in flight", raise_errors=False))

    def send(self, actions: Any, env_ids: Optional[npt.ArrayLike],
             received: Optional[Tuple[np.ndarray, Rows, List[int]]] = None) -> None:
        """Checks ids and actions, writes the actions, posts STEP to their workers
        (``env_ids=None``: every env, or those of ``received``, :attr:`last_received`)."""
        rows: Rows
        if received is not None:
            ids, rows, workers = received
            self._check_idle(workers)
        elif env_ids is None:
            ids, rows, workers = self._all_ids, self._all_rows, self._all_workers
        else:
            ids, workers = self.check_ids(env_ids)
            rows = ids
        self._write_actions(actions, ids, rows)
        self.post(workers, JobType.STEP, 0)

    def step_all(self, actions: Any) -> None:
        """``send`` + ``wait_all`` of every env in one call, for the hot path. The state
        stays DEFAULT: the board has no timeout, and after an interrupted wait it
        finishes the outstanding jobs before it posts again."""
        self._write_actions(actions, self._all_ids, self._all_rows)
        self._calls.guard(lambda: self.board.run(self._all_workers, JobType.STEP, 0, "step"))

    def returned(self) -> None:
        """Notes that :meth:`step_all`'s results went to the trainer's code."""
        self.board.returned()

    def _write_actions(self, actions: Any, ids: np.ndarray, rows: Rows) -> None:
        write_exact = self._write_exact
        if write_exact is not None and rows is self._all_rows and write_exact(actions):
            return
        arrays = self._act.encode_batch(actions, len(ids), "same_kind")
        self._results.check_not_ended(ids)
        self._act.write_rows(self._act_views, rows, arrays)

    def check_ids(self, env_ids: npt.ArrayLike) -> Tuple[np.ndarray, List[int]]:
        """The ids of ``send(actions, env_ids)``, checked (whole, idle workers); their workers."""
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"env_ids: expected a 1-d sequence of ints, got "
                             f"{ids.dtype} of shape {ids.shape}")
        ids = ids.astype(np.int64)
        if ids.size == 0:
            raise ValueError("env_ids: expected at least one env id")
        bad = ids[(ids < 0) | (ids >= self._num_envs)]
        if bad.size:
            raise ValueError(f"env_ids: expected ids in [0, {self._num_envs}), got {bad.tolist()}")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_ids: each env may be listed once, got {ids.tolist()}")
        e = self._envs_per_worker
        if e is None:
            sizes = "/".join(str(stop - start) for start, stop in self._bounds)
            raise ValueError(f"env_ids: stepping some of the envs needs workers of one "
                             f"size; these {self._num_envs} envs are spread {sizes} over "
                             f"{len(self._bounds)} workers (pass envs_per_worker, or a "
                             f"num_workers that divides the number of envs)")
        workers = sorted(set(self._row_worker[ids].tolist()))
        if len(workers) * e != ids.size:
            raise ValueError(f"env_ids: with envs_per_worker={e} a worker is stepped "
                             f"whole; list all envs of each worker, got {ids.tolist()}")
        self._check_idle(workers)
        return ids, workers

    def _check_idle(self, workers: Iterable[int]) -> None:
        busy = sorted(self._bounds[w][0] for w in workers if w in self.in_flight)
        if busy:
            raise ValueError(f"env_ids: envs {busy} are still in flight (sent, not yet "
                             f"received); recv() them first")

    def wait_all(self, during: str, timeout: Optional[float]) -> None:
        """Waits for every in-flight worker (synchronous mode); the call ends."""
        workers = sorted(self.in_flight)
        try:
            self._calls.guard(lambda: self.board.wait_for(workers, during, timeout))
        except BaseException as exc:
            if not isinstance(exc, EnvTimeoutError):  # a timeout: still in flight
                self.in_flight.clear()  # every job finished (or the env is broken)
            raise
        self.in_flight.clear()
        self._calls.pending = AsyncState.DEFAULT

    def drain_in_flight(self) -> None:
        """Finishes jobs still in flight, dropping their results (before a reset)."""
        if not self.in_flight:
            return
        workers = sorted(self.in_flight)
        self.in_flight.clear()
        try:
            self._calls.guard(lambda: self.board.wait_for(workers, "finishing earlier jobs"))
        except WorkerDiedError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the reset is the recovery
            logging.warning("FastVectorEnv: a job in flight before the reset raised %r; "
                            "dropped", exc)

    def receive(self, timeout: Optional[float]) -> Step:
        """The first ``batch_size`` envs in flight to finish (the EnvPool recv)."""
        e = self._envs_per_worker
        assert e is not None  # the asynchronous mode has workers of equal size
        k = self._batch_size // e
        if len(self.in_flight) < k:
            self._calls.pending = AsyncState.DEFAULT
            raise NoAsyncCallError(f"recv() returns {self._batch_size} envs, but only "
                                   f"{len(self.in_flight) * e} are in flight; send() or "
                                   "async_reset() first", "recv")
        workers = self._calls.guard(lambda: self.board.wait_first(self.in_flight, k, "recv",
                                                                  timeout))
        self._calls.pending = AsyncState.DEFAULT
        errors = self.board.pop_errors(workers)
        if errors:
            self.in_flight.difference_update(errors)
            error = next(iter(errors.values()))
            if isinstance(error, WorkerDiedError):
                self._calls.break_with(error)
            raise error
        self.in_flight.difference_update(workers)
        step, ids, rows = self._results.batch_of(workers)
        self.last_received = (ids, rows, list(workers))
        return step

    def close(self) -> None:
        """Drops the board (its controller holds a pidfd per worker) and what was in flight."""
        self._board = None
        self.in_flight.clear()

    def call_some(self, name: str, calls: Mapping[int, EnvCall]) -> Dict[int, Any]:
        """Calls ``name`` of the envs of ``calls`` (checked ids); only their workers are asked."""
        self.settle()
        by_worker: Dict[int, Dict[int, EnvCall]] = {}
        for env_id, call in calls.items():
            w = int(self._row_worker[env_id])
            by_worker.setdefault(w, {})[env_id - self._bounds[w][0]] = call
        workers = sorted(by_worker)
        answers = self._calls.resolve(self._calls.guard(lambda: [
            self._workers[w].call("call_some", name, by_worker[w]) for w in workers]), None)
        return {self._bounds[w][0] + k: value
                for w, answer in zip(workers, answers) for k, value in answer.items()}

    def reset(self, mask: Optional[np.ndarray],
              staged: Optional[Tuple[List[Optional[int]], Optional[Dict[str, Any]]]]) -> None:
        """Posts RESET to the workers of ``mask`` (``None``: every worker), after the jobs in
        flight; ``staged``: the envs' seeds and the options, sent first (else the default)."""
        self.drain_in_flight()
        workers = (self._all_workers if mask is None else
                   [w for w in self._all_workers if mask[slice(*self._bounds[w])].any()])
        self._results.forget_ended(mask)
        if staged is not None:
            seeds, options = staged
            for w in workers:
                rows = slice(*self._bounds[w])
                local_mask = [True] * (rows.stop - rows.start) if mask is None else mask[rows]
                self._calls.resolve([self._workers[w].call(
                    "stage_reset", StagedReset(seeds[rows], options, local_mask))], None)
        self.post(workers, JobType.RESET, RESET_DEFAULT if staged is None else RESET_STAGED)
