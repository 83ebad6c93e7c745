"""Batches N environments, each in its own worker process, over pipes.

:class:`ParallelAlfEnvironment` is the reference ("slow") path: actions and
time steps are pickled through each worker's pipe. The native
:class:`~alf_env.environments.fast_parallel_environment.FastParallelEnvironment`
keeps the same slot bookkeeping (:class:`SlotScheduler`) and must produce the
same time steps, value by value.

Slots and spares
----------------
The batch has ``num_slots = len(env_constructors) - num_spare_envs_for_reload``
slots; slot ``k`` owns rows ``[k * b, (k + 1) * b)`` of every batched tensor,
where ``b`` is each env's own batch size (1 for an unbatched env). ``env_id``
of a row is always its row index. With spares, an env that reports LAST is
handed a reset right away and queued as a spare, and its slot is taken by the
spare at the head of the queue, whose FIRST time step (from its own earlier
reset) is what the slot returns at the next step. A slow reset therefore
overlaps with the other envs' steps instead of stalling the batch.

Background resets (no spares)
-----------------------------
Without spares (and unless ``blocking``, or the envs are batched), an env
that reports LAST is handed its reset right away, as in ALF: the reset runs
while the trainer works on the batch, and the slot's next step returns the
FIRST time step it produced (the action for that slot is not sent: an env
ignores the action of the step after LAST anyway). The time steps are the
same as when the step after LAST resets the env; only the waiting moves.
A ``reset()`` of the batch uses a background reset already under way
instead of resetting that env twice, and ``seed()`` restarts one (so the
new seed applies to that episode, as it would have without background
resets). Other calls made between a LAST and the next step
(``call_envs_with_same_args``, ``render``) reach the env after its reset
began.
"""

import collections
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import numpy as np
import torch

from alf_env import nest
from alf_env.control_plane.affinity import WorkerCpus
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RestartPolicy
from alf_env.control_plane.spec_checks import ActionChecker
from alf_env.control_plane.step_timings import (
    STEP_TIMINGS_CALL,
    BatchClock,
    StepClock,
    StepTimings,
    env_figures,
    no_figure,
)
from alf_env.data_structures import StepType, TimeStep
from alf_env.errors import WorkerDiedError
from alf_env.front_ends.alf.workers import AlfWorkers, CallGuard, WorkersEnvironment


class _Resolved:
    """A promise whose value is already known (used in ``blocking`` mode)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def __call__(self, timeout: Optional[float] = None) -> Any:
        return self._value


def _to_torch(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


class SlotScheduler:
    """Which env serves which slot, and which spares wait with a pending reset.

    Shared by both batched backends so that they make the same choices.

    Args:
        num_envs: all envs, spares included.
        num_spares: how many of them are spares (the last ones at first).
    """

    def __init__(self, num_envs: int, num_spares: int) -> None:
        self.num_slots = num_envs - num_spares
        self.slot_env: List[int] = list(range(self.num_slots))
        self.spares: Deque[int] = collections.deque(range(self.num_slots, num_envs))
        # slot -> the FIRST time step its new env produced when it was reset
        # (returned at the slot's next step instead of stepping it).
        self.fresh_slots: Dict[int, Any] = {}

    @property
    def has_spares(self) -> bool:
        return bool(self.spares)

    def swap(self, slot: int) -> "tuple[int, int]":
        """Gives ``slot`` the head spare; the old env goes to the tail.

        Returns:
            ``(old_env, new_env)``: the caller resets ``old_env`` and collects
            ``new_env``'s pending reset for the slot's next step.
        """
        old = self.slot_env[slot]
        new = self.spares.popleft()
        self.spares.append(old)
        self.slot_env[slot] = new
        return old, new


class ParallelAlfEnvironment(WorkersEnvironment):
    """Batches environments that run in worker processes, over pipes.

    Args:
        env_constructors: one callable per env (spares included); each gets
            ``env_id=i`` if its signature accepts it.
        start_serially: start the workers one after another (less memory
            pressure) instead of all at once.
        blocking: step the envs one after another instead of overlapping
            them (for debugging).
        flatten: send actions and time steps as flat lists over the pipes
            (ALF's argument; the values the envs see and return are the same).
        num_spare_envs_for_reload: how many of the envs are spares that
            replace an env whose episode ended (see module doc).
        torch_num_threads_per_env: ``torch.set_num_threads`` in each worker.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``.
        worker_cpus: where the worker processes run: ``None`` (default: the
            OS decides), ``"spread"`` (worker ``i`` pinned to the ``i % n``-th
            of the ``n`` CPUs this process may use) or a sequence of CPU ids
            (worker ``i`` pinned to ``worker_cpus[i % len(worker_cpus)]``).
            ``"auto"`` (the default of ``FastParallelEnvironment``) starts
            the workers placed by the OS and may spread them while they run
            (docs/options.rst); on the pipe path here it means ``None``, which
            measured faster (docs/benchmarks.md, "Choices the defaults rest on").
        timeout: seconds that each ``reset()``, ``step()`` and call
            (``seed``, ``render``, ``call_envs_with_same_args``) may wait for
            the workers (``None``: no limit; starting is not limited). When
            it passes, :class:`~alf_env.errors.EnvTimeoutError` (both
            ``TimeoutError`` and ``multiprocessing.TimeoutError``) names the
            envs that did not answer; the environment is then unusable (its
            envs are out of step) and can only be closed, which ends the
            stuck workers within the bound of ``close()``.
        restart_policy: a :class:`~alf_env.control_plane.restart.RestartPolicy`:
            a worker that dies during a step or reset is started again with
            the same constructor and its slot returns the ``FIRST`` step of a
            new episode (``docs/contract.rst``, "Restarts"; not in
            ``blocking`` mode, where a death raises). ``None``: a death raises
            ``WorkerDiedError`` and the environment is unusable.

    Actions are checked against the action spec before anything is sent
    (``ValueError`` naming the field and the expected shape and dtype, for a
    wrong nest structure, shape, batch size or a dtype that does not cast
    safely; non-contiguous arrays and safe casts are accepted). Values are
    not checked against the bounds of a ``BoundedTensorSpec``: an action
    outside them reaches the envs unchanged (never clipped). What an env
    returns is checked against its ``time_step_spec()`` in the worker
    (``ValueError`` naming the field, e.g. ``time_step.observation``).

    Faults: an exception in an env is re-raised with its type and the
    worker's traceback once every env has answered, and the environment stays
    usable; a worker that dies raises ``WorkerDiedError`` at once, and so
    does every later call but ``close()``.

    One thread at a time: ``reset``, ``step``, ``seed``, ``sync_progress``,
    ``render`` and ``call_envs_with_same_args`` called by a second thread
    while another thread is in one of them raise
    :class:`~alf_env.errors.ConcurrentUseError` before anything is sent. It
    cannot be copied or pickled (``TypeError``; make a new one instead).

    The workers, their specs and restarts are an
    :class:`~alf_env.front_ends.alf.workers.AlfWorkers`, the thread and fault
    rules a :class:`~alf_env.front_ends.alf.workers.CallGuard`, the specs and
    the rest of the ALF API both answer the same way a
    :class:`~alf_env.front_ends.alf.workers.WorkersEnvironment`, as in
    ``FastParallelEnvironment``; what is this class's own is the pipe path of
    ``reset`` and ``step`` (``AlfEnvironment``'s ``_reset`` and ``_step`` hooks).
    """

    def __init__(self, env_constructors: Sequence[Callable[..., Any]],
                 start_serially: bool = True, blocking: bool = False,
                 flatten: bool = True, num_spare_envs_for_reload: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1,
                 start_method: str = "fork", *, timeout: Optional[float] = None,
                 worker_cpus: WorkerCpus = None,
                 restart_policy: Optional[RestartPolicy] = None) -> None:
        self._guard = CallGuard(type(self).__name__)
        self._batch_clock = BatchClock()  # the steps' waits, for timings()
        num_envs = len(env_constructors)
        self._workers = AlfWorkers(
            self, env_constructors, first_env_ids=range(num_envs + 1),
            num_spares=num_spare_envs_for_reload, start_serially=start_serially,
            flatten=flatten, job_loop=False,
            torch_num_threads_per_env=torch_num_threads_per_env, start_method=start_method,
            timeout=timeout, worker_cpus=worker_cpus, restart_policy=restart_policy)
        workers = self._workers
        self._blocking = blocking
        # An env that reports LAST resets at once, in the background (see
        # module doc); spares have their own mechanism, a batched env has one
        # LAST per row, and blocking mode waits for each env anyway.
        self._background_resets = not (num_spare_envs_for_reload or workers.env_batched
                                       or blocking)
        self._slots = SlotScheduler(num_envs, num_spare_envs_for_reload)
        # Spare env -> the promise of its pending reset (collected when it takes a slot).
        self._spare_resets: Dict[int, Any] = {}
        super().__init__(workers, self._guard, self._slots, num_envs)
        self._env_ids = np.arange(self.batch_size, dtype=np.int32)
        self._check_action = ActionChecker(workers.specs.action, self.batch_size)

    # -- the rest of the ALF API (WorkersEnvironment has the shared part) --------

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
                fresh[slot] = self._reset_promise(workers.envs[self._slots.slot_env[slot]])

    def call_envs_with_same_args(self, name: str, *args: Any, **kwargs: Any) -> List[Any]:
        """Calls ``env.name(*args, **kwargs)`` in every env; returns their values."""
        return self._guard.run("a call", self._workers.request_all, f"call of {name!r}",
                               lambda env: env.call(name, *args, **kwargs))

    def timings(self) -> StepTimings:
        """Where the steps since the last call spent their time; starts counting again.

        Per env (spares included), its own ``step`` time in its worker; per
        step, the wait from sending the actions to having every time step.
        There are no job slots here, so the straggler spread and the hand-off
        are not measured (``count`` 0; ``FastParallelEnvironment`` measures
        them). Costs one pipe call per worker now, nothing per step
        (docs/simulators.rst, "Where each step's time goes").
        """
        readings = self._guard.run("timings()", self._workers.request_all, "timings",
                                   lambda env: env.call(STEP_TIMINGS_CALL))
        return StepTimings(env_figures(readings), self._batch_clock.take(), no_figure(),
                           no_figure(), note="spread and hand-off: not measured without job "
                                             "slots (FastParallelEnvironment measures them)")

    def _close(self) -> None:
        """Closes every worker (``close()`` is idempotent and bounded in time)."""
        self._guard.close()
        self._workers.close()

    # -- restarts (restart_policy) ----------------------------------------------

    def _resolve_slots(self, promises: List[Any], during: str) -> List[Any]:
        """Waits for the slots' time steps (``promises[k]``: slot ``k``'s); a dead
        worker is restarted if the policy allows (:meth:`_restart_slots`)."""
        try:
            return self._workers.resolve(promises, during)
        except WorkerDiedError as exc:
            return self._restart_slots(promises, during, exc)

    def _restart_slots(self, promises: List[Any], during: str,
                       death: WorkerDiedError) -> List[Any]:
        """Restarts dead workers while the budget allows: each slot of one gets
        the new worker's ``FIRST`` time step; the others' answers are intact."""
        workers = self._workers
        while True:
            worker = workers.worker_of(death)
            slot_env = self._slots.slot_env
            if (self._blocking or worker is None or worker not in slot_env
                    or not workers.restarts.allows(worker)):
                raise death
            new = workers.restart(worker, death, _nothing_to_rejoin)
            promises[slot_env.index(worker)] = self._reset_promise(new)
            try:
                return workers.resolve(promises, during)
            except WorkerDiedError as exc:
                death = exc

    def _now_or_later(self, promise: Any) -> Any:
        """In ``blocking`` mode, waits for ``promise`` right away."""
        return _Resolved(promise(self._workers.timeout)) if self._blocking else promise

    # -- stepping ------------------------------------------------------------

    def _reset(self) -> TimeStep:
        return self._guard.run("reset()", self._reset_all)

    def _step(self, action: Any) -> TimeStep:
        return self._guard.run("step()", self._step_all, action)

    def _reset_all(self) -> TimeStep:
        num_slots = self._slots.num_slots
        envs = self._slots.slot_env + list(self._slots.spares)
        # A background reset under way (see module doc) is waited for, not repeated.
        pending = self._slots.fresh_slots if self._background_resets else {}
        promises = [pending[k] if k in pending else
                    self._now_or_later(self._reset_promise(self._workers.envs[i]))
                    for k, i in enumerate(envs)]
        # Spares keep their pending reset: it is collected when one takes a slot.
        self._spare_resets = dict(zip(envs[num_slots:], promises[num_slots:]))
        self._slots.fresh_slots.clear()
        return self._finish(self._resolve_slots(promises[:num_slots], "reset"))

    def _reset_promise(self, env: ProcessEnvironment) -> Any:
        """A promise of ``env``'s reset."""
        return env.reset(blocking=False)

    def _step_all(self, action: Any) -> TimeStep:
        start = StepClock.now()
        num_slots = self._slots.num_slots
        action = self._check_action(action)
        b = self._workers.specs.batch_size
        batched = self._workers.env_batched

        def send(slot: int, env: ProcessEnvironment) -> Any:
            rows = slice(slot * b, (slot + 1) * b)
            env_action = nest.map_structure(
                (lambda a: a[rows]) if batched else (lambda a: a[slot]), action)
            return env.step(env_action, blocking=False)
        promises = dict(self._slots.fresh_slots)
        self._slots.fresh_slots.clear()
        for slot, env_index in enumerate(self._slots.slot_env):
            if slot not in promises:
                promises[slot] = self._now_or_later(send(slot, self._workers.envs[env_index]))
        results = self._resolve_slots([promises[slot] for slot in range(num_slots)], "step")
        self._batch_clock.record(StepClock.now() - start)
        return self._finish(results)

    def _finish(self, results: List[Any]) -> TimeStep:
        """Batches the slots' time steps; ended slots go to spares or reset at once."""
        batched, step_types = self._batch(results)
        if self._slots.has_spares or self._background_resets:
            envs = self._workers.envs
            for slot in np.flatnonzero(step_types == StepType.LAST).tolist():
                if self._slots.has_spares:
                    old, new = self._slots.swap(slot)
                    self._slots.fresh_slots[slot] = self._spare_resets.pop(new)
                    self._spare_resets[old] = self._reset_promise(envs[old])
                else:
                    env = envs[self._slots.slot_env[slot]]
                    self._slots.fresh_slots[slot] = self._reset_promise(env)
        batched = batched._replace(env_id=self._env_ids.copy())
        time_step: TimeStep = nest.map_structure(_to_torch, batched)
        return time_step

    def _batch(self, results: List[Any]) -> "tuple[TimeStep, np.ndarray]":
        """The slots' time steps as one batched ``TimeStep`` of numpy arrays, and the
        step type of each slot (unbatched envs; spares and background resets
        only apply to those)."""
        env_batched = self._workers.env_batched
        combine = np.concatenate if env_batched else np.stack
        batched = nest.map_structure(lambda *xs: combine(xs), *results)
        step_types = np.asarray(batched.step_type)
        return batched, (step_types if not env_batched else np.zeros(0, np.int32))


def _nothing_to_rejoin(worker: int, new: ProcessEnvironment) -> None:
    """A restarted worker of the pipe path serves its slot as it is."""
