"""Posting jobs to workers in the job loop and collecting their completions
(docs/protocol.rst, "The native job loop"; docs/architecture.rst, "Data plane")."""

import functools
import inspect
import time
import weakref
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Set,
    TypeVar,
)

import numpy as np
import numpy.typing as npt
from absl import logging

from alf_env.control_plane import shutdown
from alf_env.control_plane.affinity import usable_cpus
from alf_env.control_plane.channel import receive_answers
from alf_env.control_plane.launch import close_all
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.quiet_pinning import QuietPinning
from alf_env.data_plane.pool_park import PoolPark
from alf_env.data_plane.shared_block import Controller, JobType, WaitStatus
from alf_env.errors import EnvironmentClosedError, EnvTimeoutError, WorkerDiedError

# on_ok(workers, jobs): run with the workers whose jobs just finished OK and each one's last
# job, before anything else is sent to them; returns their errors (raised by the waits).
OkHook = Callable[[List[int], Mapping[int, JobType]], Dict[int, BaseException]]

# on_death(worker, error, during): run when ``worker`` died with its job outstanding; returns
# whether a new one took its place (the hook wrote its job's results), else ``error`` is raised.
DeathHook = Callable[[int, BaseException, str], bool]

T = TypeVar("T")

#: The ``during`` of a wait for a pipe request's CALL job (a death a hook may not restart).
PIPE_CALL = "a call"


class Board(Protocol):
    """The jobs (``JobType`` and int argument) of workers ``envs``, run by :class:`JobBoard`
    through shared memory or by the gym front end's ``pipe_board.py`` on the pipes."""

    envs: Sequence[ProcessEnvironment]

    def set_death_hook(self, on_death: Optional[DeathHook]) -> None:
        """Sets the hook that may replace a dead worker (``None``: a death raises)."""

    def post(self, workers: Iterable[int], job: JobType, arg: int = 0) -> None:
        """Posts ``job`` to ``workers``, first finishing any job they still run."""

    def run(self, workers: Sequence[int], job: JobType, arg: int, during: str,
            timeout: Optional[float] = None) -> None:
        """:meth:`post`, then :meth:`wait_for` the same workers (the lockstep step)."""

    def returned(self) -> None:
        """Notes that a lockstep step's results went to the trainer's code."""

    def wait_for(self, workers: Iterable[int], during: str,
                 timeout: Optional[float] = None, raise_errors: bool = True) -> None:
        """Waits until each of ``workers`` finished its job (``during``: what they do), at most
        ``timeout`` seconds (``None``: the board's); raises ``EnvTimeoutError`` (a later wait
        still sees every completion), ``WorkerDiedError`` or, if ``raise_errors``, the first
        job's error (else it stays for :meth:`pop_errors`)."""

    def wait_first(self, candidates: Set[int], k: int, during: str,
                   timeout: Optional[float] = None) -> List[int]:
        """The first ``k`` of ``candidates`` to finish, in completion order (those finished
        earlier first); job errors stay for :meth:`pop_errors`. Raises as :meth:`wait_for`."""

    def pop_errors(self, workers: Iterable[int]) -> Dict[int, BaseException]:
        """Removes and returns what the finished jobs of ``workers`` raised."""

    def release(self, timeout: Optional[float] = None) -> None:
        """Brings the workers back from their jobs before they are closed; never raises."""


class JobLedger:
    """The bookkeeping of every :class:`Board`: each worker's last job, the workers done (in
    order), their errors, and the ``DeathHook`` (weakly if a bound method of the front end)."""

    def __init__(self, on_death: Optional[DeathHook] = None) -> None:
        self.done: Dict[int, None] = {}  # a dict used as an ordered set
        self.errors: Dict[int, BaseException] = {}
        self.jobs: Dict[int, JobType] = {}
        self.on_death: Optional[DeathHook] = None
        self.set_death_hook(on_death)

    def set_death_hook(self, on_death: Optional[DeathHook]) -> None:
        """Sets the hook that may replace a dead worker (``None``: a death raises)."""
        self.on_death = _weakly(on_death, lambda: False) if inspect.ismethod(on_death) else on_death

    def posted(self, workers: Iterable[int], job: JobType) -> None:
        """Notes that ``job`` was posted to ``workers``."""
        done, jobs = self.done, self.jobs
        for w in workers:
            done.pop(w, None)
            jobs[w] = job

    def finished_among(self, candidates: Set[int]) -> List[int]:
        """The workers of ``candidates`` whose job finished, in completion order."""
        return [w for w in self.done if w in candidates]

    def replaced(self, worker: int, error: BaseException, during: str) -> bool:
        """Whether ``on_death`` replaced the dead ``worker`` (its job then counts as done)."""
        if (self.on_death is None or not isinstance(error, WorkerDiedError)
                or not self.on_death(worker, error, during)):
            return False
        self.done[worker] = None
        return True

    def pop_errors(self, workers: Iterable[int]) -> Dict[int, BaseException]:
        """Removes and returns what the finished jobs of ``workers`` raised."""
        return {w: self.errors.pop(w) for w in workers if w in self.errors}

    def raise_first_error(self, workers: Iterable[int]) -> None:
        """Raises (and removes) the first error of ``workers``."""
        errors = self.pop_errors(workers)
        if errors:
            raise next(iter(errors.values()))


class JobBoard:
    """The parent's view of the job slots of a set of worker processes (a :class:`Board`).

    Holds its front end (``on_ok``) and is held by its workers (:meth:`doorbell`) only
    weakly, so a front end dropped without ``close()`` is collected at once.

    Args:
        controller: the ``Controller`` of the shared block; ``envs[i]`` owns job slot ``i``.
        timeout: default seconds of every wait (``None``: no limit).
        pin_when_quiet: worker ``i``'s CPU while the machine is quiet (``None``: never pin).
    """

    def __init__(self, controller: Controller, envs: Sequence[ProcessEnvironment],
                 on_ok: Optional[OkHook] = None, timeout: Optional[float] = None,
                 on_death: Optional[DeathHook] = None,
                 pin_when_quiet: Optional[Sequence[int]] = None) -> None:
        self.controller = controller
        self.envs = envs
        self.timeout = timeout
        self._on_ok: Optional[OkHook] = _weakly(on_ok, dict) if inspect.ismethod(on_ok) else on_ok
        self.ledger = JobLedger(on_death)
        self._pool = PoolPark()  # the trainer's torch threads, parked during run()
        self._pinning = None if pin_when_quiet is None else QuietPinning(
            _weakly(self.worker_pids, list), pin_when_quiet, usable_cpus())
        shutdown.register_board(self)

    def set_death_hook(self, on_death: Optional[DeathHook]) -> None:
        """:meth:`Board.set_death_hook`."""
        self.ledger.set_death_hook(on_death)

    def post(self, workers: Iterable[int], job: JobType, arg: int = 0) -> None:
        """:meth:`Board.post`."""
        workers = list(workers)
        if self.controller.num_outstanding:
            busy = [w for w in workers if self.controller.outstanding(w)]
            if busy:
                self.wait_for(busy, "finishing an earlier job")
        self.ledger.posted(workers, job)
        self.controller.post(workers, job, arg)

    def run(self, workers: Sequence[int], job: JobType, arg: int, during: str,
            timeout: Optional[float] = None) -> None:
        """:meth:`Board.run`: one native wait when nothing else is outstanding (after
        ``EnvTimeoutError`` the jobs stay posted for a later :meth:`wait_for`)."""
        controller = self.controller
        if controller.num_outstanding:
            self.post(workers, job, arg)
            self.wait_for(workers, during, timeout)
            return
        parked = self._pool.before_step()
        try:
            self.ledger.posted(workers, job)
            if timeout is None:
                timeout = self.timeout
            deadline = None if timeout is None else time.monotonic() + timeout
            # Only these jobs are outstanding: the first len(workers) completions are theirs.
            status, ids, failed = controller.run(workers, job, arg, timeout)
            if status == WaitStatus.OK:
                self._on_finished(ids.tolist(), failed)
            else:
                self._after_wait(status, ids, len(workers), during, deadline, timeout,
                                 lambda: [w for w in workers if w not in self.ledger.done])
        finally:
            self._pool.after_step(parked)
        if self.ledger.errors:
            self.ledger.raise_first_error(workers)

    def returned(self) -> None:
        """:meth:`Board.returned`; also looks, once a second, whether to pin the workers."""
        self._pool.returned()
        if self._pinning is not None:
            self._pinning.look()

    def worker_pids(self) -> List[Optional[int]]:
        """The workers' pids, in worker order (``None``: not running)."""
        return [env.pid for env in self.envs]

    def wait_for(self, workers: Iterable[int], during: str,
                 timeout: Optional[float] = None, raise_errors: bool = True) -> None:
        """:meth:`Board.wait_for`."""
        workers = list(workers)
        done = self.ledger.done
        remaining = {w for w in workers if w not in done} if done else set(workers)
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while remaining:
            ids = self._wait_some(len(remaining), during, deadline, timeout,
                                  lambda: sorted(remaining))
            remaining.difference_update(ids)
        if raise_errors and self.ledger.errors:
            self.ledger.raise_first_error(workers)

    def wait_first(self, candidates: Set[int], k: int, during: str,
                   timeout: Optional[float] = None) -> List[int]:
        """:meth:`Board.wait_first`; every outstanding job must be a candidate's."""
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        ready = self.ledger.finished_among(candidates)
        while len(ready) < k:
            ids = self._wait_some(k - len(ready), during, deadline, timeout, lambda: sorted(
                c for c in candidates if c not in self.ledger.done))
            ready.extend(ids)
        return ready[:k]

    def _wait_some(self, k: int, during: str, deadline: Optional[float],
                   timeout: Optional[float], pending: Callable[[], List[int]]) -> List[int]:
        """One native wait for ``k`` completions; records and returns them."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        status, ids = self.controller.wait(k, left)
        return self._after_wait(status, ids, k, during, deadline, timeout, pending)

    def _after_wait(self, status: WaitStatus, ids: npt.NDArray[np.int32], k: int,
                    during: str, deadline: Optional[float], timeout: Optional[float],
                    pending: Callable[[], List[int]]) -> List[int]:
        """Records what a native wait for ``k`` completions returned."""
        if status == WaitStatus.WORKER_DIED:
            return self._on_deaths(ids.tolist(), k, during, deadline, timeout, pending)
        finished: List[int] = ids.tolist()
        if finished:
            self._on_finished(finished)
        if status == WaitStatus.TIMEOUT:
            self._take_finished()  # so that only the late ones are named
            late = [w for w in pending() if w not in self.ledger.done]
            raise EnvTimeoutError(
                f"{self._envs_of(late)} did not finish {during} within {timeout:.3g} s")
        return finished

    def _on_deaths(self, dead: List[int], k: int, during: str, deadline: Optional[float],
                   timeout: Optional[float], pending: Callable[[], List[int]]) -> List[int]:
        """Abandons the dead workers' jobs; raises the first death unless ``on_death``
        replaced the worker (which counts as a completion), then waits for the rest."""
        errors = []
        for w in dead:
            self.controller.abandon(w)
            errors.append(self.envs[w].mark_died(during))
        replaced: List[int] = []
        for w, error in zip(dead, errors):
            if not self.ledger.replaced(w, error, during):
                raise error
            replaced.append(w)
        if k > len(replaced):
            return replaced + self._wait_some(k - len(replaced), during, deadline, timeout, pending)
        return replaced

    def _take_finished(self) -> None:
        """Records the completions a timed-out native wait left queued."""
        while self.controller.num_outstanding:
            status, ids = self.controller.wait(1, 0.0)
            if status != WaitStatus.OK:
                return  # none left (a death is reported by the next wait)
            self._on_finished(ids.tolist())

    def _envs_of(self, workers: List[int]) -> str:
        """The envs of ``workers`` for a message."""
        ids = [i for w in workers for i in (self.envs[w].hosted_env_ids or [w])]
        if len(ids) == len(workers):
            return f"envs {ids}"
        named = ", ".join(str(w) for w in workers)
        return f"envs {ids} (worker{'s' if len(workers) > 1 else ''} {named})"

    def _on_finished(self, workers: List[int], failed: Optional[List[int]] = None) -> None:
        """Records finished jobs; reads what their workers sent on the pipe for them
        (``failed``: those whose job reported ERROR, when the caller knows them)."""
        self.ledger.done.update(dict.fromkeys(workers))
        if failed is None:
            failed = self.controller.failed(workers)
        if failed:
            # Every report's place is taken before any is read: a Ctrl-C leaves all in step.
            reports = {}
            for worker in failed:
                try:
                    reports[worker] = self.envs[worker].pending_report()
                except Exception as exc:  # noqa: BLE001 -- e.g. known to be dead
                    self.ledger.errors[worker] = exc
            for worker, report in reports.items():
                try:  # sent right after the job reported ERROR: quick
                    report(self.timeout)
                except Exception as exc:  # noqa: BLE001 -- raised by the waits
                    self.ledger.errors[worker] = exc
        if self._on_ok is not None:
            ok = [w for w in workers if w not in failed] if failed else workers
            self.ledger.errors.update(self._on_ok(ok, self.ledger.jobs))

    def pop_errors(self, workers: Iterable[int]) -> Dict[int, BaseException]:
        """:meth:`Board.pop_errors`."""
        return self.ledger.pop_errors(workers)

    def serve_pipe(self, worker: int, write: Callable[[], None]) -> None:
        """The doorbell: makes a worker in the job loop read one pipe request (a CALL job)
        while ``write()`` fills the pipe; raises (a timeout, a death) before ``write``."""
        receive_answers([self.envs[worker].channel], self.timeout, "a call")
        if self.controller.outstanding(worker):
            self.wait_for([worker], "finishing an earlier job", raise_errors=False)
        self.post([worker], JobType.CALL)
        write()
        self.wait_for([worker], PIPE_CALL, raise_errors=False)

    def doorbell(self, worker: int) -> Callable[[Callable[[], None]], None]:
        """:meth:`serve_pipe` of ``worker``, holding the board weakly."""
        board = weakref.ref(self)

        def ring(write: Callable[[], None]) -> None:
            live = board()
            if live is None:
                raise EnvironmentClosedError(f"worker {worker}: its front end was "
                                             f"garbage collected")
            live.serve_pipe(worker, write)
        return ring

    def release(self, timeout: Optional[float] = None) -> None:
        """:meth:`Board.release`: a CLOSE job to each worker once its job finished; those still
        in the loop at ``timeout`` (default ``CLOSE_POLITE_TIMEOUT``) are terminated."""
        total = shutdown.CLOSE_POLITE_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + total
        self.ledger.on_death = None  # closing: a worker that dies now stays dead
        waiting = {i for i, env in enumerate(self.envs) if env.in_job_loop}
        closing: Set[int] = set()  # CLOSE posted, not yet finished
        try:
            for i in sorted(waiting):  # an unread answer keeps a worker from its slot
                try:
                    receive_answers([self.envs[i].channel], max(0.0, deadline - time.monotonic()),
                                    "closing")
                except Exception:  # noqa: BLE001 -- dead or stuck: terminated below
                    pass
            waiting = {i for i in waiting if self.envs[i].in_job_loop}
            while waiting:
                idle = sorted(i for i in waiting - closing if not self.controller.outstanding(i))
                if idle:
                    self.controller.post(np.asarray(idle, np.int32), JobType.CLOSE)
                    self.ledger.posted(idle, JobType.CLOSE)
                    closing.update(idle)
                try:
                    finished = self._wait_some(1, "closing", deadline, total,
                                               functools.partial(sorted, waiting))
                except EnvTimeoutError:
                    break
                except WorkerDiedError:
                    finished = []  # _wait_some abandoned its job and marked it dead
                for i in finished:
                    if i in closing:
                        closing.discard(i)
                        waiting.discard(i)
                        self.envs[i].stop_job_loop()
                waiting = {i for i in waiting if self.envs[i].in_job_loop}
        except Exception as exc:  # noqa: BLE001 -- close() must not raise
            logging.warning("could not bring workers %s back from the job loop (%s); "
                            "they will be terminated", sorted(waiting), exc)
        stuck = [self.envs[i] for i in sorted(waiting)]
        if stuck:
            logging.warning("envs %s did not leave the job loop within %.3g s; "
                            "terminating them", sorted(waiting), total)
            for env in stuck:
                env.stop_job_loop()
            close_all(stuck, polite_timeout=0.0)


def _weakly(method: Callable[..., T], gone: Callable[[], T]) -> Callable[..., T]:
    """The bound ``method`` holding its object weakly: ``gone()`` once it was collected."""
    owner, func = weakref.ref(method.__self__), method.__func__  # type: ignore[attr-defined]

    def hook(*args: Any) -> T:
        live = owner()
        return gone() if live is None else func(live, *args)
    return hook
