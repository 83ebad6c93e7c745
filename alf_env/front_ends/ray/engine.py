"""EnvActors: the Ray actors of one distributed env, their jobs and deaths; every wait is a
bounded ``ray.wait``, so a dead actor or node is seen as soon as Ray reports it."""

import dataclasses
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from absl import logging

from alf_env.control_plane.restart import RestartBudget, RestartPolicy, describe_death
from alf_env.errors import EnvironmentProcessError, EnvTimeoutError, WorkerDiedError
from alf_env.front_ends.ray._ray import ensure_initialized, is_death
from alf_env.front_ends.ray.actor import Failure, actor_class
from alf_env.front_ends.ray.restart import ActorDiedError

#: ``ray.remote`` options of every actor when ``actor_options`` is ``None``.
DEFAULT_ACTOR_OPTIONS: Dict[str, Any] = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
ActorOptions = Union[None, Dict[str, Any], Sequence[Dict[str, Any]]]
#: seconds ``close()`` waits for Ray to confirm that killed actors are gone.
KILL_CONFIRM_TIMEOUT = 10.0
#: default seconds ``close()`` lets the actors close their envs politely.
CLOSE_TIMEOUT = 10.0


@dataclasses.dataclass
class Job:
    """A method call of an actor's hosted env, in flight."""
    method: str
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]
    ref: Any
    restarted: bool = False  # posted to a recreated actor, to report the restart


class EnvActors:
    """The actors hosting the envs of one distributed env: actor ``j`` builds its hosted
    env with ``factories[j]``, for the env ids ``shares[j]``, under ``actor_options[j]``
    (a recreated actor too; ``on_restart`` re-posts its job in flight)."""

    def __init__(self, factories: Sequence[Callable[[], Any]], shares: Sequence[range], *,
                 actor_options: Sequence[Dict[str, Any]], restart_policy: Optional[RestartPolicy],
                 on_restart: Callable[[int, "Job"], None], start_timeout: float) -> None:
        self._ray = ensure_initialized()
        self._cls = actor_class(self._ray)
        self._factories = list(factories)
        self.shares = list(shares)
        self._options = [dict(o) for o in actor_options]
        self.on_restart = on_restart
        self._calls: Dict[int, Tuple[str, Tuple[Any, ...], Any]] = {}
        self._call_values: Dict[int, Any] = {}
        self._call_order: List[int] = []
        self._start_timeout = start_timeout
        self.actors: List[Any] = [None] * len(self.shares)
        self.where: List[Dict[str, Any]] = [{} for _ in self.shares]
        self.budget = RestartBudget(restart_policy, len(self.shares))
        self.jobs: Dict[int, Job] = {}                 # actor -> job in flight (oldest first)
        self._done: Dict[int, Tuple[Job, Any]] = {}    # actor -> finished job, not collected
        self.fresh: Set[int] = set()                   # recreated, restart not yet reported
        self.broken: Optional[BaseException] = None

    def start(self) -> List[Any]:
        """Starts every actor and its envs; returns each ``describe()`` (kills all on a failure)."""
        try:
            refs = [self._create(j) for j in range(len(self.shares))]
            values = self._get_all(refs, self._start_timeout, "start")
            return [self._started(j, value) for j, value in enumerate(values)]
        except BaseException:
            self.close(terminate=True)
            raise

    def _create(self, j: int) -> Any:
        if self.budget.counts[j] and self.budget.policy and self.budget.policy.actor_options:
            self._options[j] = dict(self.budget.policy.actor_options)
        self.actors[j] = self._cls.options(**self._options[j]).remote(
            self._factories[j], self.shares[j].start)
        return self.actors[j].start.remote()

    def _started(self, j: int, value: Any) -> Any:
        if isinstance(value, Failure):
            raise value.to_exception(j)
        described, self.where[j] = value
        return described

    def _get_all(self, refs: List[Any], timeout: float, during: str,
                 actors: Optional[List[int]] = None) -> List[Any]:
        """The values of ``refs``, the jobs of ``actors`` (default: actor ``k`` for ``refs[k]``)."""
        actors = list(range(len(refs))) if actors is None else actors
        ready, pending = self._ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if pending:
            late = [actors[refs.index(r)] for r in pending]
            raise EnvTimeoutError(
                f"Ray actors {late} (envs {self._env_ids(late)}) did not {during} within "
                f"{timeout:.3g} s: are there nodes with the resources of actor_options="
                f"{[self._options[j] for j in late]}? (`ray status` shows what the "
                f"cluster has)")
        values = []
        for j, ref in zip(actors, refs):
            try:
                values.append(self._ray.get(ref))
            except self._ray.exceptions.RayError as exc:
                raise self._death(j, exc, during) from exc
        return values

    def close(self, terminate: bool = False, timeout: Optional[float] = None) -> None:
        """Closes the hosted envs (unless ``terminate``), then kills every actor (bounded)."""
        timeout = CLOSE_TIMEOUT if timeout is None else timeout
        live = [(j, a) for j, a in enumerate(self.actors) if a is not None]
        if live and not self._ray.is_initialized():
            logging.warning("Ray was shut down before close(): its actors ended with it")
            live = []
        if not terminate and self.broken is None and live:
            refs = [a.close.remote(False) for _, a in live]
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=timeout)
            for (j, _), ref in zip(live, refs):
                if ref in ready:
                    try:
                        value = self._ray.get(ref)
                    except self._ray.exceptions.RayError:
                        continue  # dead already: the kill below is enough
                    if isinstance(value, Failure):
                        logging.warning("Ray actor %d: closing its envs raised %s: %s\n%s", j,
                                        value.remote.type_name, value.remote.message,
                                        value.remote.traceback_text)
        for _, actor in live:
            self._ray.kill(actor, no_restart=True)
        if live:  # (a Ray call would start a new local Ray after ray.shutdown())
            refs = [a.where.remote() for _, a in live]
            _, pending = self._ray.wait(refs, num_returns=len(refs), timeout=KILL_CONFIRM_TIMEOUT)
            if pending:
                logging.warning("Ray did not confirm within %.0f s that %d killed actors are "
                                "gone", KILL_CONFIRM_TIMEOUT, len(pending))
        self.actors = [None] * len(self.shares)
        self.jobs.clear()
        self._done.clear()
        self._calls.clear()

    def info(self) -> List[Dict[str, Any]]:
        """What the front ends' ``actor_info()`` return."""
        return [dict(where, envs=list(share), restarts=restarts)
                for share, where, restarts in zip(self.shares, self.where, self.budget.counts)]

    def post(self, j: int, method: str, *args: Any, restarted: bool = False, **kwargs: Any) -> None:
        """Starts ``method(*args, **kwargs)`` of actor ``j``'s hosted env."""
        self.jobs[j] = Job(method, args, kwargs, self.actors[j].run.remote(method, *args, **kwargs),
                           restarted)
        if restarted:
            self.fresh.discard(j)

    def busy(self) -> List[int]:
        """Actors with a job not yet collected, oldest first."""
        return list(self.jobs) + [j for j in self._done if j not in self.jobs]

    def collect(self, actors: Sequence[int], count: int, timeout: Optional[float],
                during: str) -> List[Tuple[int, Job, Any]]:
        """``(actor, job, value)`` of the first ``count`` jobs of ``actors`` to finish, in order;
        a value may be a ``Failure``, which the caller raises once all are in. After an
        ``EnvTimeoutError`` finished jobs stay; an ``ActorDiedError`` breaks the group."""
        deadline = None if timeout is None else time.monotonic() + timeout
        wanted = set(actors)
        while (need := count - sum(1 for j in self._done if j in wanted)) > 0:
            waiting = [j for j in self.jobs if j in wanted]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            refs = [self.jobs[j].ref for j in waiting]
            ready, _ = self._ray.wait(refs, num_returns=min(need, len(refs)), timeout=remaining)
            if not ready:
                busy = sorted(waiting)
                raise EnvTimeoutError(
                    f"envs {self._env_ids(busy)} (Ray actors {busy}) gave no answer within "
                    f"{timeout:.3g} s during {during}")
            for ref in ready:
                j = waiting[refs.index(ref)]
                job = self.jobs.pop(j)
                value, death = self._get(j, ref)
                if death is None:
                    self._done[j] = (job, value)
                else:
                    self.jobs[j] = job  # dead too: on_restart replaces it
                    self._restart_or_raise(j, death, during)
        done = [j for j in self._done if j in wanted][:count]
        return [(j, *self._done.pop(j)) for j in done]

    def put_back(self, results: Sequence[Tuple[int, Job, Any]]) -> None:
        """Returns collected results, to be collected again (after a failed recv)."""
        for j, job, value in results:
            self._done[j] = (job, value)

    def post_calls(self, method: str,
                   per_actor_args: Union[Sequence[Tuple[Any, ...]], Dict[int, Tuple[Any, ...]]]
                   ) -> None:
        """Posts ``method`` to the actors (arguments per actor, or keyed by actor); Ray
        runs each after the actor's job in flight, whose result stays collectable."""
        if not isinstance(per_actor_args, dict):
            per_actor_args = dict(enumerate(per_actor_args))
        self._calls = {j: (method, args, self.actors[j].run.remote(method, *args))
                       for j, args in sorted(per_actor_args.items())}
        self._call_order = list(self._calls)
        self._call_values = {}

    def wait_calls(self, timeout: Optional[float], during: str) -> List[Any]:
        """The values of :meth:`post_calls`, in the order of the actors posted to; the
        first env exception is raised once all have answered, a timeout keeps them pending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._calls:
            waiting = list(self._calls)
            refs = [self._calls[j][2] for j in waiting]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = self._ray.wait(refs, num_returns=1, timeout=remaining)
            if not ready:
                raise EnvTimeoutError(
                    f"envs {self._env_ids(sorted(waiting))} (Ray actors {sorted(waiting)}) "
                    f"gave no answer within {timeout:.3g} s during {during}")
            j = waiting[refs.index(ready[0])]
            method, args, ref = self._calls[j]
            value, death = self._get(j, ref)
            if death is not None:
                try:
                    self._restart_or_raise(j, death, during)
                except BaseException:
                    self._calls.clear()
                    raise
                self._calls[j] = (method, args, self.actors[j].run.remote(method, *args))
                continue
            self._call_values[j] = value
            del self._calls[j]
        values = [self._call_values[j] for j in self._call_order]
        self._call_values = {}
        raise_first_failure([(j, None, v) for j, v in zip(self._call_order, values)])
        return values

    def call_all(self, method: str,
                 per_actor_args: Union[Sequence[Tuple[Any, ...]], Dict[int, Tuple[Any, ...]]],
                 timeout: Optional[float], during: str) -> List[Any]:
        """:meth:`post_calls` and :meth:`wait_calls` in one."""
        self.post_calls(method, per_actor_args)
        return self.wait_calls(timeout, during)

    def _get(self, j: int, ref: Any) -> Tuple[Any, Optional[BaseException]]:
        """``(value, death)`` of a finished job: a death is the actor's or its node's,
        or one of its env workers' (that env is unusable)."""
        try:
            value = self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            if is_death(self._ray, exc):
                return None, exc
            offset = self.shares[j].start  # not a death: e.g. a result that does not pickle
            return Failure(EnvironmentProcessError(f"Ray could not run the job: {exc}", offset),
                           offset, "a Ray task", ""), None
        if isinstance(value, Failure) and value.is_worker_death:
            return None, value.to_exception(j)
        return value, None

    def _restart_or_raise(self, j: int, exc: BaseException, during: str) -> None:
        """Recreates dead actor ``j`` if the policy allows, else breaks the group and raises."""
        death = exc if isinstance(exc, WorkerDiedError) else self._death(j, exc, during)
        if not self.budget.allows(j):
            self.broken = death
            if death is exc:
                raise death
            raise death from exc
        self.budget.spend(j, self.shares[j], f"Ray actor {j}: {describe_death(exc)}")
        self._ray.kill(self.actors[j], no_restart=True)
        try:
            ref = self._create(j)
            value = self._get_all([ref], self.budget.start_timeout, "restart", [j])[0]
            self._started(j, value)
        except BaseException as restart_error:
            self.broken = death
            raise death from restart_error
        self.fresh.add(j)
        job = self.jobs.pop(j, None)
        if job is not None:
            self.on_restart(j, job)

    def _death(self, j: int, exc: BaseException, during: str) -> ActorDiedError:
        reason = str(exc).strip().splitlines()
        return ActorDiedError(list(self.shares[j]), j, self.where[j].get("node", ""),
                              f"{type(exc).__name__}: {' '.join(reason)[:500]}", during)

    def _env_ids(self, actors: Sequence[int]) -> List[int]:
        return [i for j in actors for i in self.shares[j]]


def options_per_actor(actor_options: ActorOptions, num_actors: int) -> List[Dict[str, Any]]:
    """``actor_options`` as one dict per actor (``ValueError`` for a list of another length)."""
    if actor_options is None:
        return [dict(DEFAULT_ACTOR_OPTIONS) for _ in range(num_actors)]
    if isinstance(actor_options, dict):
        return [dict(actor_options) for _ in range(num_actors)]
    options = [dict(o) for o in actor_options]
    if len(options) != num_actors:
        raise ValueError(f"actor_options: expected a dict or a list of num_actors="
                         f"{num_actors} dicts, got a list of {len(options)}")
    return options


def raise_first_failure(results: Sequence[Tuple[int, Optional[Job], Any]]) -> None:
    """Raises the env exception of the first failed job, if any."""
    for j, _, value in results:
        if isinstance(value, Failure):
            raise value.to_exception(j)
