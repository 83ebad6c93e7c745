"""AlfEnvBatch: several ALF envs in one worker process of FastParallelEnvironment.

The parent sees one batched env of the members' rows (EnvPool's threads, as processes).
A member that returns ``LAST`` is reset once the worker has reported the step, overlapping
the trainer's work; that ``FIRST`` is what it returns at the group's next step or reset
(one reset, as without the overlap), and seeding resets it again."""

import functools
import operator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np

from alf_env import nest
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.remote import RemoteMethod, mark_raised_by
from alf_env.control_plane.worker import close_each, construct_env, forward_progress
from alf_env.data_structures import StepType, TimeStep
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.environments.alf_gym_wrapper import FlatSteps, flat_steps_of
from alf_env.environments.members_specs import (
    SPEC_METHODS,
    BatchedEnvironment,
    BatchSpecs,
    check_same_specs,
)
from alf_env.front_ends.alf.alf_rows import MemberEnvs


def build_members(env_constructors: Sequence[Callable[..., Any]], first_id: int,
                  concurrently: bool) -> List[Any]:
    """Builds member ``j`` with ``env_constructors[j]`` and env id ``first_id + j`` (each in a
    thread if ``concurrently``); on errors, closes those built and raises the first's."""
    if not concurrently or len(env_constructors) < 2:
        members: List[Any] = []
        try:
            for j, ctor in enumerate(env_constructors):
                members.append(construct_env(ctor, first_id + j))
        except BaseException:
            close_each(members)
            raise
        return members
    with ThreadPoolExecutor(max_workers=len(env_constructors),
                            thread_name_prefix="alf_env-build-member") as pool:
        futures = [pool.submit(construct_env, ctor, first_id + j)
                   for j, ctor in enumerate(env_constructors)]
    # Leaving the with block waited for every constructor.
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        close_each([f.result() for f in futures if f.exception() is None])
        raise errors[0]
    return [f.result() for f in futures]


class AlfEnvBatch(BatchedEnvironment, MemberEnvs):
    """The envs of one worker, batched in order: the ``MemberEnvs`` its job handler steps.

    Args:
        env_constructors: one per member; each gets ``env_id=`` (``env_id``,
            ``env_id + 1``, ...) if it accepts one.

    Raises:
        ValueError: the members' specs or batch sizes differ (naming the member).
    """

    def __init__(self, env_constructors: Sequence[Callable[..., Any]],
                 env_id: Optional[int] = None, *, build_concurrently: bool = False) -> None:
        first_id = self._first_id = env_id or 0
        self._members: List[AlfEnvironment] = build_members(env_constructors, first_id,
                                                            build_concurrently)
        try:
            check_same_specs(self._members, ("batched", "batch_size") + SPEC_METHODS,
                             "env group member")
        except BaseException:
            self._close()
            raise
        first = self._members[0]
        self._member_batched = bool(first.batched)
        self._member_rows = first.batch_size if self._member_batched else 1
        super().__init__(BatchSpecs.of(first, len(self._members) * self._member_rows))
        self._combine = np.concatenate if self._member_batched else np.stack
        # Each member's flat step and reset (a plain AlfGymWrapper's), or None.
        self._flat: List[Optional[FlatSteps]] = [
            None if self._member_batched else flat_steps_of(m) for m in self._members]
        # member -> the FIRST of its reset after LAST (a flat reset's leaves, or a TimeStep)
        self._pending_first: Dict[int, Union[List[Any], TimeStep]] = {}
        self._ended: List[int] = []
        self._deferred_error: Optional[BaseException] = None

    @property
    def members(self) -> List[AlfEnvironment]:
        return self._members

    def _reset(self) -> TimeStep:
        self.begin_job()
        return self._batch([self.reset_member(j) for j in range(len(self._members))])

    def _step(self, action: Any) -> TimeStep:
        self.begin_job()
        b = self._member_rows
        results = []
        for j in range(len(self._members)):
            rows = slice(j * b, (j + 1) * b) if self._member_batched else j
            member_action = nest.map_structure(operator.itemgetter(rows), action)
            results.append(self.step_member(j, member_action))
        return self._batch(results)

    def begin_job(self) -> None:
        """Starts a step or reset of the group: raises a failed early reset's error."""
        error, self._deferred_error = self._deferred_error, None
        if error is not None:
            self._pending_first.clear()
            raise error
        self._ended = []

    def _take_first(self, j: int) -> Optional[TimeStep]:
        """The FIRST time step of member ``j``'s early reset (taken), or ``None``."""
        first = self._pending_first.pop(j, None)
        if type(first) is list:  # a flat reset's leaves: the member packs them
            return self._members[j].current_time_step()
        return first  # type: ignore[return-value]  # a TimeStep or None

    def reset_member(self, j: int) -> TimeStep:
        """Resets member ``j`` (or returns the FIRST of its early reset)."""
        first = self._take_first(j)
        return first if first is not None else self._run(j, "reset", self._members[j].reset)

    def step_member(self, j: int, action: Any) -> TimeStep:
        """Steps member ``j`` (after an early reset: returns its FIRST)."""
        first = self._take_first(j)
        if first is not None:
            return first
        time_step: TimeStep = self._run(j, "step", self._members[j].step, action)
        if not self._member_batched and int(time_step.step_type) == StepType.LAST:
            self._ended.append(j)
        return time_step

    def step_member_flat(self, j: int, action_views: List[np.ndarray]) -> Optional[List[Any]]:
        """Steps member ``j`` with its flat step (``AlfGymWrapper.flat_steps``), if any."""
        first = self._pending_first.get(j)
        if first is not None:
            if type(first) is not list:
                return None
            del self._pending_first[j]
            return first
        flat = self._flat[j]
        if flat is None:
            return None
        try:
            result = flat.step(action_views)  # not through _run: a call less per step
        except Exception as exc:
            self._note_member(exc, j, "step")
            raise
        if result is None:
            return None
        leaves: List[Any]
        leaves, is_last = result
        if is_last:
            self._ended.append(j)
        return leaves

    def _run(self, j: int, during: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` for member ``j``; an exception notes which env raised it."""
        try:
            return fn(*args)
        except Exception as exc:
            self._note_member(exc, j, during)
            raise

    def _note_member(self, exc: Exception, j: int, during: str) -> None:
        mark_raised_by(exc, self._first_id + j)  # the error report names this env
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(f"(raised by env {self._first_id + j} during {during}; its "
                         f"worker hosts envs {self._first_id}-"
                         f"{self._first_id + len(self._members) - 1})")

    def _batch(self, results: List[TimeStep]) -> TimeStep:
        return cast(TimeStep, nest.map_structure(lambda *xs: self._combine(xs), *results))

    def reset_ended(self) -> None:
        """Resets the members that returned ``LAST`` (a reset's error: at the next job)."""
        ended, self._ended = self._ended, []
        for j in ended:
            try:
                self._pending_first[j] = self._reset_early(j)
            except Exception as exc:  # noqa: BLE001 -- raised by the next job
                self._deferred_error = exc
                return

    def _reset_early(self, j: int) -> Union[List[Any], TimeStep]:
        """Member ``j``'s flat reset's leaves, or its ``reset()``'s ``TimeStep``."""
        flat = self._flat[j]
        reset = self._members[j].reset if flat is None else flat.reset
        return cast(Union[List[Any], TimeStep], self._run(j, "reset", reset))

    def seed_each(self, seeds: Sequence[Any]) -> None:
        """Seeds member ``j`` with ``seeds[j]``; a member reset early resets again."""
        if len(seeds) != len(self._members):
            raise ValueError(f"seeds: expected {len(self._members)} seeds (one per member), "
                             f"got {len(seeds)}")
        for env, seed in zip(self._members, seeds):
            env.seed(seed)
        for j in list(self._pending_first):
            self._pending_first[j] = self._reset_early(j)

    def seed(self, seed: Any) -> None:
        """Seeds member ``j`` with ``seed * n + j`` (as ``BatchEnvironmentWrapper``)."""
        n = len(self._members)
        self.seed_each([seed * n + j for j in range(n)])

    def call_each(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> List[Any]:
        """``member.name(*args, **kwargs)`` for every member."""
        return [getattr(env, name)(*args, **kwargs) for env in self._members]

    def member_call(self, j: int, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """``members[j].name(*args, **kwargs)``."""
        return getattr(self._members[j], name)(*args, **kwargs)

    def member_access(self, j: int, name: str) -> Any:
        """Attribute ``name`` of member ``j`` (a method: a ``RemoteMethod`` marker)."""
        value = getattr(self._members[j], name)
        return RemoteMethod(name) if callable(value) else value

    def sync_progress(self, progress: Any = None) -> None:
        """Forwards ``progress`` to every member that defines ``sync_progress``."""
        for env in self._members:
            forward_progress(env, progress)

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders member 0."""
        return self._members[0].render(mode)

    def _close(self) -> None:
        close_each(self._members)


class MemberProxy:
    """Member ``index`` of a worker's :class:`AlfEnvBatch`, as ``FastParallelEnvironment.envs``
    lists it: ``call`` and attribute access go through ``group``, the worker."""

    def __init__(self, group: "ProcessEnvironment", index: int, env_id: int) -> None:
        self._group = group
        self._index = index
        self.env_id = env_id

    @property
    def pid(self) -> Optional[int]:
        """The pid of the worker process that hosts this env."""
        return self._group.pid

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Calls ``env.name(*args, **kwargs)`` in the worker; returns a promise."""
        return self._group.call("member_call", self._index, name, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        """Attribute ``name`` of the remote env (a method is called remotely; no dunders)."""
        if (name.startswith("__") and name.endswith("__")) or "_group" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self._group.call("member_access", self._index, name)()
        if isinstance(value, RemoteMethod):
            return functools.partial(self._call_blocking, value.name)
        return value

    def _call_blocking(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.call(name, *args, **kwargs)()

    def __repr__(self) -> str:
        return f"MemberProxy(env_id={self.env_id}, worker pid={self.pid})"
