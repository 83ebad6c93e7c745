"""What both batched ALF front ends are built from: AlfWorkers, CallGuard, WorkersEnvironment.

Objects that own their state, so that each front end's ``step`` and ``reset`` read
from top to bottom in its own file (docs/architecture.rst, "Front ends")."""

import abc
import functools
from typing import Any, Callable, List, Optional, Protocol, Sequence, Tuple, TypeVar

from alf_env.control_plane.affinity import (
    WorkerCpus,
    pin_workers,
    pinned_cpus,
    pinned_when_quiet,
    plan_worker_cpus,
)
from alf_env.control_plane.channel import resolve_all
from alf_env.control_plane.guards import NotCopyable, OneThread
from alf_env.control_plane.launch import close_all, start_environments
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RestartBudget, RestartPolicy, describe_death
from alf_env.control_plane.shutdown import close_when_collected
from alf_env.control_plane.step_timings import STEP_TIMINGS_CALL, DurationStats, env_figures
from alf_env.environments.members_specs import BatchedEnvironment, BatchSpecs, check_same_specs
from alf_env.errors import (
    EnvironmentClosedError,
    EnvironmentProcessError,
    EnvTimeoutError,
    WorkerDiedError,
)

__all__ = ["AlfWorkers", "BatchSpecs", "CallGuard", "Slots", "WorkersEnvironment", "check_seeds"]

_T = TypeVar("_T")


class CallGuard:
    """Who may use a batched environment (``owner``, its class name) now: one thread at a
    time, nobody once it is closed or broken. The hot path reads :attr:`refused` and calls
    :meth:`check` only when it is set; :meth:`run` is the whole sequence for other calls."""

    __slots__ = ("refused", "enter", "leave", "_owner", "_closed", "_broken")

    def __init__(self, owner: str) -> None:
        one_thread = OneThread(owner)
        self.refused = False  # closed or broken
        self.enter: Callable[[str], None] = one_thread.enter  # ConcurrentUseError if taken
        self.leave: Callable[[], None] = one_thread.leave
        self._owner = owner
        self._closed = False
        self._broken: Optional[BaseException] = None

    def check(self) -> None:
        """Raises if calls are refused: ``EnvironmentClosedError``, the ``WorkerDiedError``
        that broke the environment, or ``EnvironmentProcessError`` after a timeout."""
        if not self.refused:
            return
        if self._closed:
            raise EnvironmentClosedError(f"{self._owner} is closed; create a new environment")
        if isinstance(self._broken, WorkerDiedError):
            raise self._broken
        raise EnvironmentProcessError(
            f"this {self._owner} is unusable: an earlier wait timed out "
            f"({self._broken}); its envs are out of step. close() it and create a "
            f"new one") from self._broken

    def break_with(self, error: BaseException) -> None:
        """Refuses every later call because of ``error`` (a death or a timeout)."""
        self._broken = error
        self.refused = True

    def close(self) -> None:
        """Refuses every later call: the environment is closed."""
        self._closed = True
        self.refused = True

    def run(self, what: str, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` (the call ``what``) if not refused; a death or a timeout breaks the env."""
        self.check()
        self.enter(what)
        try:
            return fn(*args)
        except (WorkerDiedError, EnvTimeoutError) as exc:
            self.break_with(exc)
            raise
        finally:
            self.leave()


def check_seeds(seeds: Sequence[int], num_envs: int, num_spares: int) -> List[int]:
    """``seeds`` as a list, checked to hold one seed per env (``ValueError`` if not)."""
    seeds = list(seeds)
    if len(seeds) != num_envs:
        spares = ", spares included" if num_spares else ""
        raise ValueError(f"seeds: expected {num_envs} seeds (one per env{spares}), "
                         f"got {len(seeds)}")
    return seeds


class AlfWorkers:
    """The worker processes of one batched ALF environment, started, pinned and checked to
    have the same specs. ``owner``: the front end (its workers end when it is collected);
    ``first_env_ids``: each worker's first env id, then the number of envs; ``job_loop``:
    shared memory; the others: docs/options.rst (``ValueError``/``TypeError`` if bad)."""

    def __init__(self, owner: object, env_constructors: Sequence[Callable[..., Any]], *,
                 first_env_ids: Sequence[int], num_spares: int, start_serially: bool,
                 flatten: bool, job_loop: bool, torch_num_threads_per_env: Optional[int],
                 start_method: str, timeout: Optional[float], worker_cpus: WorkerCpus,
                 restart_policy: Optional[RestartPolicy]) -> None:
        num_workers = len(env_constructors)
        if num_workers < 1:
            raise ValueError("env_constructors: expected at least one constructor, got none")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: expected a positive number of seconds or None, "
                             f"got {timeout!r}")
        self.timeout = None if timeout is None else float(timeout)
        if not 0 <= num_spares < num_workers:
            raise ValueError(
                f"num_spare_envs_for_reload: expected 0 <= value < {num_workers} (the "
                f"number of env_constructors), got {num_spares}")
        cpu_plan = plan_worker_cpus(worker_cpus, num_workers, lockstep=job_loop and not num_spares)
        self.spread = cpu_plan is not None  # spread over the CPUs: waits spin longer
        self._pinned_cpus = pinned_cpus(worker_cpus, cpu_plan)  # also a restarted worker's
        self.pin_when_quiet = pinned_when_quiet(worker_cpus, cpu_plan)  # "auto"; see JobBoard
        self.restarts = RestartBudget(restart_policy, num_workers)
        self._make_worker = functools.partial(
            _make_worker, list(env_constructors), list(first_env_ids), flatten=flatten,
            job_loop=job_loop, torch_num_threads_per_env=torch_num_threads_per_env,
            start_method=start_method)
        # A restart replaces a worker in place (the same list).
        self.envs: List[ProcessEnvironment] = [self._make_worker(i) for i in range(num_workers)]
        start_environments(self.envs, start_serially)
        self._finalizer = close_when_collected(owner, self.envs)
        try:
            pin_workers(self.pids(), self._pinned_cpus)
            check_same_specs(self.envs)
            first = self.envs[0]
            self.env_batched = bool(first.batched)
            batch_size = first.batch_size if self.env_batched else 1
            assert batch_size is not None  # a batched env has a batch size
            if num_spares and self.env_batched:
                raise ValueError(
                    "num_spare_envs_for_reload: spares replace one env at the end of "
                    "its episode, which needs unbatched envs; got batched envs of "
                    f"batch size {batch_size}; use 0 spares")
            self.specs = BatchSpecs.of(first, batch_size)
        except BaseException:
            self.close()
            raise

    def pids(self) -> List[int]:
        """The pid of every worker (spares included)."""
        return [env.pid for env in self.envs if env.pid is not None]

    def resolve(self, promises: List[Any], during: str) -> List[Any]:
        """Waits for the promises together, within :attr:`timeout`."""
        return resolve_all(promises, self.timeout, during)

    def request_all(self, during: str, send: Callable[[ProcessEnvironment], Any]) -> List[Any]:
        """``send(worker)`` (a pipe request) to every worker, then their answers."""
        return resolve_all([send(env) for env in self.envs], self.timeout, during)

    def worker_of(self, death: WorkerDiedError) -> Optional[int]:
        """The index of the worker that ``death`` reports, if it is one of these."""
        return next((i for i, env in enumerate(self.envs) if env.env_id == death.env_id), None)

    def restart(self, worker: int, death: WorkerDiedError,
                rejoin: Callable[[int, ProcessEnvironment], None]) -> ProcessEnvironment:
        """Replaces dead ``worker`` with a new one that ``rejoin(worker, new)`` makes
        serve its slot; if that fails, closes it and raises ``death`` from the failure."""
        old = self.envs[worker]
        self.restarts.spend(worker, old.hosted_env_ids or [worker], describe_death(death))
        close_all([old], polite_timeout=0.0)
        new = self._make_worker(worker)
        try:
            new.start(wait_to_start=False)
            new.wait_start(self.restarts.start_timeout)
            if self._pinned_cpus is not None and new.pid is not None:
                pin_workers([new.pid], [self._pinned_cpus[worker]])
            try:
                check_same_specs([old, new], label="worker")
            except ValueError as exc:
                raise ValueError(f"env {old.env_id} was restarted with other specs: "
                                 f"{exc}") from None
            self.envs[worker] = new
            rejoin(worker, new)
        except BaseException as exc:
            close_all([new], polite_timeout=0.0)
            raise death from exc
        return new

    def close(self) -> None:
        """Closes every worker (idempotent, bounded in time)."""
        self._finalizer.detach()
        close_all(self.envs)


class Slots(Protocol):
    """Which env serves which slot (a ``SlotScheduler``)."""

    num_slots: int
    slot_env: List[int]


class WorkersEnvironment(NotCopyable, BatchedEnvironment):
    """The part of the ALF API that both batched ALF front ends answer the same way; each
    keeps how a step, a reset and a seed reach its workers (``_step``, ``_reset``,
    :meth:`_seed_all`). Private (``__``) attributes: neither reads the other's state."""

    def __init__(self, workers: AlfWorkers, guard: CallGuard, slots: Slots, num_envs: int) -> None:
        super().__init__(workers.specs._replace(
            batch_size=slots.num_slots * workers.specs.batch_size))
        self.__workers, self.__guard, self.__slots = workers, guard, slots
        self.__num_envs = num_envs

    @property
    def is_tensor_based(self) -> bool:
        """``True``: time steps are batched torch tensors."""
        return True

    @property
    def num_spare_envs_for_reload(self) -> int:
        """How many envs are spares."""
        return len(self.__workers.envs) - self.__slots.num_slots

    def worker_pids(self) -> List[int]:
        """Pids of every worker process, spares included."""
        return self.__workers.pids()

    @property
    def restart_policy(self) -> Optional[RestartPolicy]:
        """The policy for dead workers (``None``: a death makes the env unusable)."""
        return self.__workers.restarts.policy

    @property
    def timeout(self) -> Optional[float]:
        """Seconds each reset, step and call may wait for the workers (``None``: no limit)."""
        return self.__workers.timeout

    def seed(self, seeds: Sequence[int]) -> None:
        """Seeds env ``i`` with ``seeds[i]``, spares included (``ValueError`` for another count)."""
        self.__guard.check()
        self.__guard.run("seed()", self._seed_all,
                         check_seeds(seeds, self.__num_envs, self.num_spare_envs_for_reload))

    @abc.abstractmethod
    def _seed_all(self, seeds: List[int]) -> None:
        """:meth:`seed`'s hook (the seeds checked, guarded)."""

    def _env_figures(self) -> Tuple[DurationStats, ...]:
        """Each env's figures for ``timings()``; its worker's clock starts counting again."""
        return env_figures(self.__guard.run("timings()", self.__workers.request_all, "timings",
                                            lambda env: env.call(STEP_TIMINGS_CALL)))

    def sync_progress(self, progress: Any = None) -> None:
        """Forwards ``progress`` to every env that has ``sync_progress``; waits for all."""
        self.__guard.run("a call", self.__workers.request_all, "sync_progress",
                         lambda env: env.sync_progress(progress, blocking=False))

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders the env serving slot 0."""
        env = self.__workers.envs[self.__slots.slot_env[0]]
        return self.__guard.run("a call", lambda: self.__workers.resolve(
            [env.call("render", mode)], "render")[0])


def _make_worker(constructors: Sequence[Callable[..., Any]], env_ids: Sequence[int], i: int, *,
                 flatten: bool, job_loop: bool, torch_num_threads_per_env: Optional[int],
                 start_method: str) -> ProcessEnvironment:
    """Worker ``i``, not started (``env_ids``: as ``AlfWorkers``' ``first_env_ids``)."""
    return ProcessEnvironment(constructors[i], env_id=env_ids[i], flatten=flatten,
                              fast=job_loop, hosted_envs=env_ids[i + 1] - env_ids[i],
                              num_envs=env_ids[-1],  # ids below this
                              torch_num_threads_per_env=torch_num_threads_per_env,
                              start_method=start_method)
