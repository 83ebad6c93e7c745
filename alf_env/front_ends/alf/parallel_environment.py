"""ParallelAlfEnvironment: N environments, each in a worker process of its own, over pipes.

The reference path, which FastParallelEnvironment matches value by value; both keep their
slots in a :class:`SlotScheduler`. Background resets: without spares, ``blocking`` or batched
envs, an env that reports LAST gets its reset at once, as in ALF, so that it runs while the
trainer works; the slot's next step returns that FIRST instead of sending the action (ignored
after LAST anyway). ``reset()`` waits for such a reset rather than repeat it, ``seed()``
starts it again (so the new seed applies), other calls reach the env after it began."""

import collections
import operator
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import numpy as np
import torch

from alf_env import nest
from alf_env.control_plane.affinity import WorkerCpus
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RestartPolicy
from alf_env.control_plane.spec_checks import ActionChecker
from alf_env.control_plane.step_timings import BatchClock, StepClock, StepTimings, no_figure
from alf_env.data_structures import StepType, TimeStep
from alf_env.errors import WorkerDiedError
from alf_env.front_ends.alf.workers import AlfWorkers, CallGuard, WorkersEnvironment


class SlotScheduler:
    """Which env serves which slot, and which spares (the last ``num_spares`` of ``num_envs``
    at first) wait with a pending reset; shared, so both ALF front ends choose alike."""

    def __init__(self, num_envs: int, num_spares: int) -> None:
        self.num_slots = num_envs - num_spares
        self.slot_env: List[int] = list(range(self.num_slots))
        self.spares: Deque[int] = collections.deque(range(self.num_slots, num_envs))
        # slot -> its new env's pending FIRST (returned at the slot's next step).
        self.fresh_slots: Dict[int, Any] = {}

    @property
    def has_spares(self) -> bool:
        return bool(self.spares)

    def swap(self, slot: int) -> "tuple[int, int]":
        """Gives ``slot`` the head spare; the old env goes to the tail. Returns ``(old_env,
        new_env)``: the caller resets ``old_env`` and collects ``new_env``'s pending reset."""
        old = self.slot_env[slot]
        new = self.spares.popleft()
        self.spares.append(old)
        self.slot_env[slot] = new
        return old, new


class ParallelAlfEnvironment(WorkersEnvironment):
    """Batches environments that run in worker processes, over pipes.

    Each argument, and when to change it: docs/options.rst ("ALF front ends");
    bad actions, faults and threads: docs/reliability.md ("Fault table").

    Args:
        env_constructors: one callable per env (spares included); each gets
            ``env_id=i`` if its signature accepts it.
        flatten: send actions and time steps as flat lists over the pipes.
        num_spare_envs_for_reload: spares that take the slot of an env that resets.
        worker_cpus: ``None`` (the OS decides), ``"spread"`` or CPU ids; ``"auto"``
            means ``None`` on the pipe path, which measured faster.
        timeout: seconds each reset, step and call may wait for the workers; then
            ``EnvTimeoutError``, and only ``close()`` is left.
        restart_policy: restart a worker that dies during a step or reset (not with
            ``blocking``; docs/contract.rst, "Restarts"). ``None``: a death raises.
    """

    def __init__(self, env_constructors: Sequence[Callable[..., Any]], start_serially: bool = True,
                 blocking: bool = False, flatten: bool = True, num_spare_envs_for_reload: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1, start_method: str = "fork", *,
                 timeout: Optional[float] = None, worker_cpus: WorkerCpus = None,
                 restart_policy: Optional[RestartPolicy] = None) -> None:
        self._guard = CallGuard(type(self).__name__)
        self._batch_clock = BatchClock()  # the steps' waits, for timings()
        num_envs = len(env_constructors)
        workers = self._workers = AlfWorkers(
            self, env_constructors, first_env_ids=range(num_envs + 1),
            num_spares=num_spare_envs_for_reload, start_serially=start_serially,
            flatten=flatten, job_loop=False,
            torch_num_threads_per_env=torch_num_threads_per_env, start_method=start_method,
            timeout=timeout, worker_cpus=worker_cpus, restart_policy=restart_policy)
        self._blocking = blocking
        # Not with spares (their own mechanism), batched envs (a LAST per row) or blocking.
        self._background_resets = not (num_spare_envs_for_reload or workers.env_batched or blocking)
        self._slots = SlotScheduler(num_envs, num_spare_envs_for_reload)
        # Spare env -> the promise of its pending reset (collected when it takes a slot).
        self._spare_resets: Dict[int, Any] = {}
        super().__init__(workers, self._guard, self._slots, num_envs)
        self._env_ids = np.arange(self.batch_size, dtype=np.int32)
        self._check_action = ActionChecker(workers.specs.action, self.batch_size)

    @property
    def envs(self) -> List[ProcessEnvironment]:
        """All the worker envs, spares included."""
        return self._workers.envs

    def _seed_all(self, seeds: List[int]) -> None:
        workers = self._workers
        workers.resolve([env.call("seed", s) for env, s in zip(workers.envs, seeds)], "seed")
        if self._background_resets and self._slots.fresh_slots:
            # A reset under way used the old seed: start it again.
            fresh = self._slots.fresh_slots
            for slot in list(fresh):
                fresh[slot] = workers.envs[self._slots.slot_env[slot]].reset(blocking=False)

    def call_envs_with_same_args(self, name: str, *args: Any, **kwargs: Any) -> List[Any]:
        """Calls ``env.name(*args, **kwargs)`` in every env; returns their values."""
        return self._guard.run("a call", self._workers.request_all, f"call of {name!r}",
                               lambda env: env.call(name, *args, **kwargs))

    def timings(self) -> StepTimings:
        """Where the steps since the last call spent their time; starts counting again
        (docs/simulators.rst, "Where each step's time goes")."""
        return StepTimings(self._env_figures(), self._batch_clock.take(), no_figure(),
                           no_figure(), note="spread and hand-off: not measured without job "
                                             "slots (FastParallelEnvironment measures them)")

    def _close(self) -> None:
        self._guard.close()
        self._workers.close()

    def _resolve_slots(self, promises: List[Any], during: str) -> List[Any]:
        """Waits for the slots' time steps, restarting dead workers if the policy allows."""
        try:
            return self._workers.resolve(promises, during)
        except WorkerDiedError as exc:
            return self._restart_slots(promises, during, exc)

    def _restart_slots(self, promises: List[Any], during: str, death: WorkerDiedError) -> List[Any]:
        """Restarts dead workers while the budget allows (the others' answers are intact)."""
        workers = self._workers
        while True:
            worker = workers.worker_of(death)
            slot_env = self._slots.slot_env
            if (self._blocking or worker is None or worker not in slot_env
                    or not workers.restarts.allows(worker)):
                raise death
            new = workers.restart(worker, death, _nothing_to_rejoin)
            promises[slot_env.index(worker)] = new.reset(blocking=False)
            try:
                return workers.resolve(promises, during)
            except WorkerDiedError as exc:
                death = exc

    def _now_or_later(self, promise: Any) -> Any:
        if not self._blocking:
            return promise
        value = promise(self._workers.timeout)  # blocking: a promise already kept
        return lambda timeout=None: value

    def _reset(self) -> TimeStep:
        return self._guard.run("reset()", self._reset_all)

    def _step(self, action: Any) -> TimeStep:
        return self._guard.run("step()", self._step_all, action)

    def _reset_all(self) -> TimeStep:
        num_slots = self._slots.num_slots
        envs = self._slots.slot_env + list(self._slots.spares)
        # A background reset under way is waited for, not repeated.
        pending = self._slots.fresh_slots if self._background_resets else {}
        promises = [pending[k] if k in pending else
                    self._now_or_later(self._workers.envs[i].reset(blocking=False))
                    for k, i in enumerate(envs)]
        # Spares keep their pending reset: it is collected when one takes a slot.
        self._spare_resets = dict(zip(envs[num_slots:], promises[num_slots:]))
        self._slots.fresh_slots.clear()
        return self._finish(self._resolve_slots(promises[:num_slots], "reset"))

    def _step_all(self, action: Any) -> TimeStep:
        start = StepClock.now()
        num_slots = self._slots.num_slots
        action = self._check_action(action)
        b = self._workers.specs.batch_size
        batched = self._workers.env_batched
        promises = dict(self._slots.fresh_slots)
        self._slots.fresh_slots.clear()
        for slot, env_index in enumerate(self._slots.slot_env):
            if slot not in promises:
                rows = slice(slot * b, (slot + 1) * b) if batched else slot
                env_action = nest.map_structure(operator.itemgetter(rows), action)
                env = self._workers.envs[env_index]
                promises[slot] = self._now_or_later(env.step(env_action, blocking=False))
        results = self._resolve_slots([promises[slot] for slot in range(num_slots)], "step")
        self._batch_clock.record(StepClock.now() - start)
        return self._finish(results)

    def _finish(self, results: List[Any]) -> TimeStep:
        """Batches the slots' time steps; ended slots go to spares or reset at once."""
        combine = np.concatenate if self._workers.env_batched else np.stack
        batched = nest.map_structure(lambda *xs: combine(xs), *results)
        if self._slots.has_spares or self._background_resets:  # unbatched envs only
            envs = self._workers.envs
            for slot in np.flatnonzero(batched.step_type == StepType.LAST).tolist():
                if self._slots.has_spares:
                    old, new = self._slots.swap(slot)
                    self._slots.fresh_slots[slot] = self._spare_resets.pop(new)
                    self._spare_resets[old] = envs[old].reset(blocking=False)
                else:
                    env = envs[self._slots.slot_env[slot]]
                    self._slots.fresh_slots[slot] = env.reset(blocking=False)
        batched = batched._replace(env_id=self._env_ids.copy())
        time_step: TimeStep = nest.map_structure(
            lambda a: torch.from_numpy(np.ascontiguousarray(a)), batched)
        return time_step


def _nothing_to_rejoin(worker: int, new: ProcessEnvironment) -> None:
    """A restarted worker of the pipe path serves its slot as it is."""
