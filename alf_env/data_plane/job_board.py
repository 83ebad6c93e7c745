"""Posting jobs to workers in the job loop and collecting their completions.

Shared by the shared-memory front ends. A failed job's exception, sent on the
worker's pipe, is read as soon as the completion is seen (so the pipe stays
in step) and raised by the wait that asked for that worker; a dead worker's
job is abandoned so that closing can proceed. See docs/protocol.rst, "The
native job loop", and docs/architecture.rst, "Data plane" (the doorbell).
"""

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

# on_ok(workers, jobs): called with the workers whose jobs just finished OK and
# the last job posted to each worker (see JobBoard.job_of), before anything else
# is sent to them; returns what went wrong per worker while handling them
# (raised by the waits as job errors).
OkHook = Callable[[List[int], Mapping[int, JobType]], Dict[int, BaseException]]

# on_death(worker, error, during): called when ``worker`` died with its job
# outstanding (the job abandoned, ``error`` its WorkerDiedError); returns whether
# a new worker took its place (its job then counts as finished, its results
# written by the hook: a restart, control_plane/restart.py), else the wait
# raises ``error``.
DeathHook = Callable[[int, BaseException, str], bool]

T = TypeVar("T")

#: What a wait for a pipe request's CALL job is doing (its ``during``): a death
#: then is one of the request's, which a ``DeathHook`` may refuse to restart.
PIPE_CALL = "a call"


class Board(Protocol):
    """The jobs of a set of workers, as a front end's engine drives them.

    Worker ``i`` is ``envs[i]``; a job is a ``JobType`` (STEP, RESET) with an int
    argument whose meaning the front end gives it. :class:`JobBoard` runs the
    jobs through the job slots of shared memory; a front end without shared
    memory implements the same interface with pipe requests (the gym front
    end's ``pipe_board.py``), so one engine and one set of rules serves both;
    both keep their bookkeeping in a :class:`JobLedger`.
    """

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

    def job_of(self, worker: int) -> Optional[JobType]:
        """The last job posted to ``worker``, or ``None``."""

    def wait_for(self, workers: Iterable[int], during: str,
                 timeout: Optional[float] = None, raise_errors: bool = True) -> None:
        """Waits until each of ``workers`` finished its job; raises what one raised
        (``EnvTimeoutError``, ``WorkerDiedError``, a job's error), unless
        ``raise_errors`` is false (then see :meth:`pop_errors`)."""

    def wait_first(self, candidates: Set[int], k: int, during: str,
                   timeout: Optional[float] = None) -> List[int]:
        """The first ``k`` of ``candidates`` to finish, in completion order; job
        errors stay for :meth:`pop_errors`."""

    def pop_errors(self, workers: Iterable[int]) -> Dict[int, BaseException]:
        """Removes and returns what the finished jobs of ``workers`` raised."""

    def release(self, timeout: Optional[float] = None) -> None:
        """Lets the workers' jobs end before they are closed; never raises."""


class JobLedger:
    """The bookkeeping every :class:`Board` keeps, whatever carries its jobs: the
    last job posted to each worker, the workers whose job finished (in completion
    order), what failed jobs raised, and the hook that may replace a dead worker.

    Args:
        on_death: see ``DeathHook``; held weakly if a bound method (a board must
            not keep its front end alive).
    """

    def __init__(self, on_death: Optional[DeathHook] = None) -> None:
        self.done: Dict[int, None] = {}  # a dict used as an ordered set
        self.errors: Dict[int, BaseException] = {}
        self.jobs: Dict[int, JobType] = {}
        self.on_death: Optional[DeathHook] = None
        self.set_death_hook(on_death)

    def set_death_hook(self, on_death: Optional[DeathHook]) -> None:
        """Sets the hook that may replace a dead worker (``None``: a death raises)."""
        self.on_death = (_weakly(on_death, lambda: False) if inspect.ismethod(on_death)
                         else on_death)

    def posted(self, workers: Iterable[int], job: JobType) -> None:
        """Notes that ``job`` was posted to ``workers`` (none of them is done)."""
        done, jobs = self.done, self.jobs
        for w in workers:
            done.pop(w, None)
            jobs[w] = job

    def finished_among(self, candidates: Set[int]) -> List[int]:
        """The workers of ``candidates`` whose job finished, in completion order."""
        return [w for w in self.done if w in candidates]

    def replaced(self, worker: int, error: BaseException, during: str) -> bool:
        """Whether ``on_death`` replaced the dead ``worker`` (its job then counts
        as finished)."""
        if (self.on_death is None or not isinstance(error, WorkerDiedError)
                or not self.on_death(worker, error, during)):
            return False
        self.done[worker] = None
        return True

    def pop_errors(self, workers: Iterable[int]) -> Dict[int, BaseException]:
        """Removes and returns what the finished jobs of ``workers`` raised."""
        return {w: self.errors.pop(w) for w in workers if w in self.errors}

    def raise_first_error(self, workers: Iterable[int]) -> None:
        """Raises (and removes) what the first of ``workers`` whose job failed raised."""
        errors = self.pop_errors(workers)
        if errors:
            raise next(iter(errors.values()))


class JobBoard:
    """The parent's view of the job slots of a set of worker processes (a :class:`Board`).

    Holds its front end (``on_ok``) and is held by its workers (:meth:`doorbell`)
    only weakly, so a front end dropped without ``close()`` is collected at once.

    Args:
        controller: the ``Controller`` of the shared block.
        envs: the workers; ``envs[i]`` owns job slot ``i``.
        on_ok: optional hook run for the jobs that finished OK (see ``OkHook``).
        timeout: default seconds of a wait (``None``: no limit), also bounding
            the waits inside :meth:`post` and :meth:`serve_pipe`.
        on_death: optional hook that may replace a dead worker (see
            ``DeathHook``); held weakly if a bound method. Only a wait's death
            branch calls it, so it costs the steps nothing.
        pin_when_quiet: worker ``i``'s CPU while no other process uses the
            CPUs (:class:`~alf_env.control_plane.quiet_pinning.QuietPinning`;
            ``None``: the board never pins).
    """

    def __init__(self, controller: Controller, envs: Sequence[ProcessEnvironment],
                 on_ok: Optional[OkHook] = None, timeout: Optional[float] = None,
                 on_death: Optional[DeathHook] = None,
                 pin_when_quiet: Optional[Sequence[int]] = None) -> None:
        self.controller = controller
        self.envs = envs
        self.timeout = timeout
        self._on_ok: Optional[OkHook] = (_weakly(on_ok, dict) if inspect.ismethod(on_ok)
                                         else on_ok)
        self.ledger = JobLedger(on_death)
        self._pool = PoolPark()  # the trainer's torch threads, parked during run()
        # Worker i pinned to CPU pin_when_quiet[i] while the machine is otherwise idle.
        self._pinning = None if pin_when_quiet is None else QuietPinning(
            _weakly(self.worker_pids, list), pin_when_quiet, usable_cpus())
        # At exit (or SIGTERM), workers still in the loop are brought back first.
        shutdown.register_board(self)

    def set_death_hook(self, on_death: Optional[DeathHook]) -> None:
        """Sets the hook that may replace a dead worker (see ``on_death``)."""
        self.ledger.set_death_hook(on_death)

    # -- posting ---------------------------------------------------------------

    def post(self, workers: Iterable[int], job: JobType, arg: int = 0) -> None:
        """Posts ``job`` to ``workers``, first finishing any job they still run."""
        workers = list(workers)
        if self.controller.num_outstanding:
            busy = [w for w in workers if self.controller.outstanding(w)]
            if busy:
                self.wait_for(busy, "finishing an earlier job")
        self._post_idle(workers, job, arg)

    def _post_idle(self, workers: List[int], job: JobType, arg: int) -> None:
        """Posts ``job`` to ``workers``, none of which has a job outstanding."""
        self.ledger.posted(workers, job)
        self.controller.post(workers, job, arg)

    def run(self, workers: Sequence[int], job: JobType, arg: int, during: str,
            timeout: Optional[float] = None) -> None:
        """:meth:`post` then :meth:`wait_for` the same workers: the synchronous step's path,
        usually one native wait when nothing else is outstanding.

        Raises:
            as :meth:`wait_for` (on ``EnvTimeoutError`` the jobs stay posted: a later
            :meth:`wait_for` picks them up).
        """
        controller = self.controller
        if controller.num_outstanding:
            self.post(workers, job, arg)
            self.wait_for(workers, during, timeout)
            return
        # The trainer's OpenMP threads sleep while the workers step (not spin
        # on the cores the workers need): data_plane/pool_park.py.
        parked = self._pool.before_step()
        try:
            self.ledger.posted(workers, job)
            controller.post(workers, job, arg)
            if timeout is None:
                timeout = self.timeout
            deadline = None if timeout is None else time.monotonic() + timeout
            # Only these jobs are outstanding, so the first len(workers)
            # completions are theirs: one native wait, unless a death or the
            # timeout takes the slow branch.
            status, ids = controller.wait(len(workers), timeout)
            if status == WaitStatus.OK:
                self._on_finished(ids.tolist())
            else:
                self._after_wait(status, ids, len(workers), during, deadline, timeout,
                                 lambda: [w for w in workers if w not in self.ledger.done])
        finally:
            self._pool.after_step(parked)
        if self.ledger.errors:
            self.ledger.raise_first_error(workers)

    def returned(self) -> None:
        """Notes that the front end handed a lockstep step's results to the trainer's
        code (what runs from here to the next :meth:`run` may leave torch's threads
        spinning: data_plane/pool_park.py), and looks once a second whether to pin
        the workers (control_plane/quiet_pinning.py)."""
        self._pool.returned()
        if self._pinning is not None:
            self._pinning.look()

    def worker_pids(self) -> List[Optional[int]]:
        """The workers' pids, in worker order (a restarted worker's is new;
        ``None``: not running)."""
        return [env.pid for env in self.envs]

    def job_of(self, worker: int) -> Optional[JobType]:
        """The last job posted to ``worker``, or ``None``."""
        return self.ledger.jobs.get(worker)

    def is_done(self, worker: int) -> bool:
        """Whether the last job of ``worker`` finished (and nothing was posted since)."""
        return worker in self.ledger.done

    def outstanding(self, worker: int) -> bool:
        """Whether ``worker`` has a job whose completion was not seen yet."""
        return bool(self.controller.outstanding(worker))

    # -- waiting ---------------------------------------------------------------

    def wait_for(self, workers: Iterable[int], during: str,
                 timeout: Optional[float] = None, raise_errors: bool = True) -> None:
        """Waits until each of ``workers`` finished its job; raises what one raised.

        Args:
            during: what they do (for error messages).
            timeout: seconds at most (``None``: the board's ``timeout``).
            raise_errors: raise what a job raised (else keep it for :meth:`pop_errors`).

        Raises:
            EnvTimeoutError: ``timeout`` passed first (a later wait still sees every
                completion).
            WorkerDiedError: a worker died before finishing.
            Exception: what a worker's job raised (the first in ``workers``).
        """
        workers = list(workers)
        done = self.ledger.done
        remaining = {w for w in workers if w not in done} if done else set(workers)
        if timeout is None:
            timeout = self.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while remaining:
            ids = self._wait_some(len(remaining), during, deadline, timeout,
                                  lambda: sorted(remaining))
            remaining.difference_update(ids)
        if raise_errors and self.ledger.errors:
            self.ledger.raise_first_error(workers)

    def wait_first(self, candidates: Set[int], k: int, during: str,
                   timeout: Optional[float] = None) -> List[int]:
        """Returns the first ``k`` of ``candidates`` to finish, in completion order.

        Every outstanding job must belong to a candidate. Workers that finished
        earlier come first. Job errors are not raised: ask :meth:`pop_errors`.

        Raises:
            EnvTimeoutError, WorkerDiedError: as :meth:`wait_for`.
        """
        if timeout is None:
            timeout = self.timeout
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
        """Records what a native wait for ``k`` completions returned: the
        finished jobs, or the death branch, or the timeout's error."""
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
        """The death branch of :meth:`_wait_some`: abandons the dead workers' jobs;
        raises the first death unless ``on_death`` replaced the worker, then waits
        for the rest of the ``k`` completions (a replaced worker counts as one)."""
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
            return replaced + self._wait_some(k - len(replaced), during, deadline, timeout,
                                              pending)
        return replaced

    def _take_finished(self) -> None:
        """Records the completions a timed-out native wait left queued."""
        while self.controller.num_outstanding:
            status, ids = self.controller.wait(1, 0.0)
            if status != WaitStatus.OK:
                return  # none left (a death is reported by the next wait)
            self._on_finished(ids.tolist())

    def _envs_of(self, workers: List[int]) -> str:
        """The envs of ``workers`` for a message (with the workers if they host several)."""
        ids = [i for w in workers for i in (self.envs[w].hosted_env_ids or [w])]
        if len(ids) == len(workers):
            return f"envs {ids}"
        named = ", ".join(str(w) for w in workers)
        return f"envs {ids} (worker{'s' if len(workers) > 1 else ''} {named})"

    def _on_finished(self, workers: List[int]) -> None:
        """Records finished jobs; reads what their workers sent on the pipe for them."""
        self.ledger.done.update(dict.fromkeys(workers))
        failed = self.controller.failed(workers)
        if failed:
            # Every report's place on its pipe is taken before any is read, so
            # an interrupted read (Ctrl-C) leaves no pipe out of step.
            reports = {}
            for worker in failed:
                try:
                    reports[worker] = self.envs[worker].pending_report()
                except Exception as exc:  # noqa: BLE001 -- e.g. known to be dead
                    self.ledger.errors[worker] = exc
            for worker, report in reports.items():
                try:
                    # Sent right after the job reported ERROR: this is quick.
                    report(self.timeout)
                except Exception as exc:  # noqa: BLE001 -- raised by the waits
                    self.ledger.errors[worker] = exc
        if self._on_ok is not None:
            ok = [w for w in workers if w not in failed] if failed else workers
            self.ledger.errors.update(self._on_ok(ok, self.ledger.jobs))

    def pop_errors(self, workers: Iterable[int]) -> Dict[int, BaseException]:
        """Removes and returns what the finished jobs of ``workers`` raised."""
        return self.ledger.pop_errors(workers)

    # -- pipe and shutdown -----------------------------------------------------

    def serve_pipe(self, worker: int, write: Callable[[], None]) -> None:
        """The doorbell: make a worker in the job loop serve one pipe request.

        The worker's earlier answers are received first (a worker writing one that
        nobody reads would never take the job), then a CALL job makes it read its
        pipe while ``write()`` fills it, so a request of any size goes through.
        Returns once the worker has read the request. Errors of earlier jobs stay
        for the wait that asks for them.

        Raises:
            EnvTimeoutError, WorkerDiedError: as :meth:`wait_for`, before ``write``
                is called (nothing was posted).
        """
        receive_answers([self.envs[worker].channel], self.timeout, "a call")
        if self.controller.outstanding(worker):
            self.wait_for([worker], "finishing an earlier job", raise_errors=False)
        self.post([worker], JobType.CALL)
        write()
        self.wait_for([worker], PIPE_CALL, raise_errors=False)

    def doorbell(self, worker: int) -> Callable[[Callable[[], None]], None]:
        """:meth:`serve_pipe` of ``worker``, for its ``start_job_loop``; holds the board weakly."""
        board = weakref.ref(self)

        def ring(write: Callable[[], None]) -> None:
            live = board()
            if live is None:
                raise EnvironmentClosedError(f"worker {worker}: its front end was "
                                             f"garbage collected")
            live.serve_pipe(worker, write)
        return ring

    def release(self, timeout: Optional[float] = None) -> None:
        """Brings every worker back from the job loop; terminates stuck ones.

        Each worker gets a CLOSE job once its current job has finished, so one
        stuck worker delays nobody else; those still in the loop at ``timeout``
        (default ``CLOSE_POLITE_TIMEOUT``, for all together) are terminated. Never raises.
        """
        total = shutdown.CLOSE_POLITE_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + total
        self.ledger.on_death = None  # closing: a worker that dies now stays dead
        waiting = {i for i, env in enumerate(self.envs) if env.in_job_loop}
        closing: Set[int] = set()  # CLOSE posted, not yet finished
        try:
            for i in sorted(waiting):
                # An answer still unread (a pending call) keeps its worker from its slot.
                try:
                    receive_answers([self.envs[i].channel], max(0.0, deadline - time.monotonic()),
                                    "closing")
                except Exception:  # noqa: BLE001 -- dead or stuck: terminated below
                    pass
            waiting = {i for i in waiting if self.envs[i].in_job_loop}
            while waiting:
                idle = sorted(i for i in waiting - closing
                              if not self.controller.outstanding(i))
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
            # Stuck in a job: asking politely on the pipe is pointless.
            close_all(stuck, polite_timeout=0.0)


def _weakly(method: Callable[..., T], gone: Callable[[], T]) -> Callable[..., T]:
    """``method`` (a bound method) holding its object weakly: ``gone()`` once the
    object was collected."""
    owner, func = weakref.ref(method.__self__), method.__func__  # type: ignore[attr-defined]

    def hook(*args: Any) -> T:
        live = owner()
        return gone() if live is None else func(live, *args)
    return hook
