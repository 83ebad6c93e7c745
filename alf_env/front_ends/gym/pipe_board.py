"""The job board of ``FastVectorEnv``'s pipe path: jobs as pipe requests.

A :class:`~alf_env.data_plane.job_board.Board` as ``JobBoard`` is, so both paths
share every rule of the engine and the API. Waiting watches every worker's pipe
and process together: a dead worker raises at once, a timeout loses nothing.
"""

import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set

from absl import logging

from alf_env.control_plane import shutdown
from alf_env.control_plane.channel import Promise, wait_answers
from alf_env.control_plane.launch import close_all
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.data_plane.job_board import DeathHook, JobLedger
from alf_env.data_plane.shared_block import JobType
from alf_env.errors import EnvTimeoutError, WorkerDiedError
from alf_env.front_ends.gym.gym_rows import EnvResult

__all__ = ["PipeBoard"]

#: ``on_result(worker, job, answer)``: the answer of a finished STEP or RESET (per
#: env of the worker, its result; ``None`` for an env a reset left alone).
ResultHook = Callable[[int, JobType, List[Optional[EnvResult]]], None]


class PipeBoard:
    """Posts STEP and RESET jobs to workers as pipe requests and collects the answers
    (what ``on_result`` raises is raised by the waits as the job's error)."""

    def __init__(self, envs: Sequence[ProcessEnvironment], actions_of: Callable[[int], List[Any]],
                 on_result: ResultHook, on_death: Optional[DeathHook] = None) -> None:
        self.envs = envs
        self._actions_of = actions_of
        self._on_result = on_result
        self.ledger = JobLedger(on_death)  # the bookkeeping JobBoard keeps too
        self._promises: Dict[int, Promise] = {}   # the answer each busy worker owes

    def set_death_hook(self, on_death: Optional[DeathHook]) -> None:
        self.ledger.set_death_hook(on_death)

    def post(self, workers: Iterable[int], job: JobType, arg: int = 0) -> None:
        """Sends ``job`` to ``workers``, first finishing any job they still run."""
        workers = list(workers)
        busy = [w for w in workers if w in self._promises]
        if busy:
            self.wait_for(busy, "finishing an earlier job")
        if job is not JobType.STEP and job is not JobType.RESET:
            raise ValueError(f"the pipe path runs STEP and RESET jobs, not {job!r}")
        self.ledger.posted(workers, job)
        for w in workers:
            self._promises[w] = (self.envs[w].call("step", self._actions_of(w))
                                 if job is JobType.STEP else self.envs[w].call("reset", arg))

    def run(self, workers: Sequence[int], job: JobType, arg: int, during: str,
            timeout: Optional[float] = None) -> None:
        self.post(workers, job, arg)
        self.wait_for(workers, during, timeout)

    def returned(self) -> None:
        """Nothing: torch's threads are parked only for a shared-memory step."""

    def wait_for(self, workers: Iterable[int], during: str,
                 timeout: Optional[float] = None, raise_errors: bool = True) -> None:
        """Waits until each of ``workers`` answered; raises as ``Board.wait_for``."""
        workers = list(workers)
        busy = [w for w in workers if w in self._promises]
        while busy:
            try:
                wait_answers([self._promises[w] for w in busy], None, timeout, during)
            except WorkerDiedError as exc:
                busy.remove(self._replace_dead(busy, exc, during))
                continue
            for w in busy:
                self._finish(w)
            break
        if raise_errors:
            self.ledger.raise_first_error(workers)

    def wait_first(self, candidates: Set[int], k: int, during: str,
                   timeout: Optional[float] = None) -> List[int]:
        """The first ``k`` of ``candidates`` to answer, in order; as ``Board.wait_first``."""
        ready = self.ledger.finished_among(candidates)
        while len(ready) < k:
            busy = sorted(w for w in candidates if w in self._promises)
            try:
                order = wait_answers([self._promises[w] for w in busy], k - len(ready),
                                     timeout, during)
            except WorkerDiedError as exc:
                ready.append(self._replace_dead(busy, exc, during))
                continue
            for i in order:
                self._finish(busy[i])
                ready.append(busy[i])
        return ready[:k]

    def _replace_dead(self, busy: List[int], exc: WorkerDiedError, during: str) -> int:
        """The worker of ``busy`` that ``exc`` reports dead, once ``on_death`` replaced
        it (its job then counts as finished); raises ``exc`` if it did not."""
        dead = [w for w in busy if self.envs[w].env_id == exc.env_id]
        if not dead or not self.ledger.replaced(dead[0], exc, during):
            raise exc
        self._promises.pop(dead[0], None)
        return dead[0]

    def _finish(self, worker: int) -> None:
        """Takes the answer of ``worker`` (it has arrived) and hands it on."""
        promise = self._promises.pop(worker)
        self.ledger.done[worker] = None
        try:
            self._on_result(worker, self.ledger.jobs[worker], promise())
        except Exception as exc:  # noqa: BLE001 -- raised by the waits
            self.ledger.errors[worker] = exc

    def pop_errors(self, workers: Iterable[int]) -> Dict[int, BaseException]:
        return self.ledger.pop_errors(workers)

    def release(self, timeout: Optional[float] = None) -> None:
        """Lets the workers finish their jobs before they are closed; never raises (reading
        the answers keeps a worker from blocking on a full pipe while it should close)."""
        total = shutdown.CLOSE_POLITE_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + total
        self.ledger.on_death = None  # closing: a worker that dies now stays dead
        pending, self._promises = self._promises, {}
        while pending:
            workers = sorted(pending)
            promises = [pending[w] for w in workers]
            try:
                wait_answers(promises, None, max(0.0, deadline - time.monotonic()), "closing")
                return
            except WorkerDiedError as exc:  # that worker owes nothing any more
                dead = [w for w in workers if self.envs[w].env_id == exc.env_id]
                for w in dead or workers:
                    pending.pop(w)
            except EnvTimeoutError:
                answered = {workers[i] for i in wait_answers(promises, 0)}
                stuck = [w for w in workers if w not in answered]
                logging.warning("envs %s did not finish their jobs within %.3g s; "
                                "terminating them", stuck, total)
                close_all([self.envs[w] for w in stuck], polite_timeout=0.0)
                return
            except Exception as exc:  # noqa: BLE001 -- close() must not raise
                logging.warning("could not wait for the jobs of workers %s (%s); they "
                                "will be terminated", workers, exc)
                close_all([self.envs[w] for w in workers], polite_timeout=0.0)
                return
