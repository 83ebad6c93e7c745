"""FastParallelEnvironment: ParallelAlfEnvironment's results, stepped through shared memory.

The pipes keep what has no fixed size (``seed``, ``render``, ``call``, errors); the
design: docs/architecture.rst; what each fault raises: docs/reliability.md."""

import functools
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch

from alf_env import nest
from alf_env.control_plane.affinity import AUTO, WorkerCpus, normal_scheduling, usable_cpu_count
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RestartPolicy
from alf_env.control_plane.spec_checks import ActionChecker
from alf_env.control_plane.step_timings import StepTimings, batch_figures
from alf_env.control_plane.torch_threads import advise_torch_threads
from alf_env.data_plane.job_board import PIPE_CALL, JobBoard
from alf_env.data_plane.job_loop import JobLoopSpec, join_job_loop, start_job_loops
from alf_env.data_plane.shared_block import JobType, SharedBlock, copy_leaves
from alf_env.data_structures import StepType, TimeStep
from alf_env.errors import EnvTimeoutError, WorkerDiedError
from alf_env.front_ends.alf.alf_rows import AlfRowsHandler
from alf_env.front_ends.alf.env_batch import AlfEnvBatch, MemberProxy
from alf_env.front_ends.alf.parallel_environment import SlotScheduler
from alf_env.front_ends.alf.workers import AlfWorkers, BatchSpecs, CallGuard, WorkersEnvironment
from alf_env.nest import compile_nest

_STEP = JobType.STEP
_RESET = JobType.RESET


class FastParallelEnvironment(WorkersEnvironment):
    """Like ``ParallelAlfEnvironment``, with steps and resets through shared memory.

    The arguments not listed are ``ParallelAlfEnvironment``'s (``worker_cpus``
    defaults to ``"auto"``); each, and when to change it: docs/options.rst.

    Args:
        zero_copy: return views of the shared rows, valid until the next step.
        spin_us: how long a waiter spins before it sleeps (-1 adaptive, 0 never).
        num_workers: worker processes, dividing the number of envs (default: about
            one per usable CPU; one per env with spares or ``blocking``).

    Raises:
        ValueError: ``zero_copy`` with spares, or a ``num_workers`` that does not fit.
    """

    _board: JobBoard  # deleted by close()

    def __init__(self, env_constructors: Sequence[Callable[..., Any]], start_serially: bool = True,
                 blocking: bool = False, flatten: bool = True, num_spare_envs_for_reload: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1, start_method: str = "fork", *,
                 zero_copy: bool = False, spin_us: int = -1, timeout: Optional[float] = None,
                 worker_cpus: WorkerCpus = AUTO, num_workers: Optional[int] = None,
                 restart_policy: Optional[RestartPolicy] = None) -> None:
        if zero_copy and num_spare_envs_for_reload:
            raise ValueError("zero_copy: views need each slot to keep its env; got "
                             f"num_spare_envs_for_reload={num_spare_envs_for_reload}; "
                             "use zero_copy=False with spares")
        self._guard = CallGuard(type(self).__name__)
        self._time_step: Optional[TimeStep] = None  # the last one returned
        constructors = list(env_constructors)
        self._num_envs = len(constructors)
        g = self._group_size = plan_group_size(self._num_envs, num_workers,
                                               num_spare_envs_for_reload, blocking)
        if g > 1:
            constructors = [
                functools.partial(AlfEnvBatch, constructors[begin:begin + g], begin,
                                  build_concurrently=not start_serially)
                for begin in range(0, self._num_envs, g)]
        workers = self._workers = AlfWorkers(
            self, constructors, first_env_ids=range(0, len(constructors) * g + 1, g),
            num_spares=num_spare_envs_for_reload, start_serially=start_serially,
            flatten=flatten, job_loop=True,
            torch_num_threads_per_env=torch_num_threads_per_env, start_method=start_method,
            timeout=timeout, worker_cpus=worker_cpus, restart_policy=restart_policy)
        self._blocking = blocking
        self._slots = SlotScheduler(len(workers.envs), num_spare_envs_for_reload)
        super().__init__(workers, self._guard, self._slots, self._num_envs)
        self._has_spares = self._slots.has_spares
        # Why: parallel_environment.py. Not with spares, batched envs or groups (they
        # reset their own), blocking, or zero_copy (the reset would overwrite the views).
        self._background_resets = not (num_spare_envs_for_reload or workers.env_batched
                                       or blocking or zero_copy)
        self._check_action = ActionChecker(workers.specs.action, self.batch_size)
        self._job_loop_specs: List[JobLoopSpec] = []  # for _rejoin
        try:
            self._rows = SlotRows(workers.specs, len(workers.envs), self._slots.slot_env, zero_copy)
            controller = self._rows.block.controller(spin_us, workers_spread=workers.spread)
            self._board = JobBoard(controller, workers.envs, timeout=workers.timeout,
                                   pin_when_quiet=workers.pin_when_quiet)
            b, rows = workers.specs.batch_size, self._rows
            handlers = [AlfRowsHandler((i * b, (i + 1) * b), rows.action_names,
                                       rows.time_step_names, grouped=g > 1)
                        for i in range(len(workers.envs))]
            start_job_loops(self._board, rows.block, spin_us, workers.spread, handlers)
            if workers.restarts.enabled:
                self._job_loop_specs = [JobLoopSpec(rows.block, w, spin_us, handler, workers.spread)
                                        for w, handler in enumerate(handlers)]
                self._board.set_death_hook(self._restart_dead_worker)
            normal_scheduling(workers.pids())
            advise_torch_threads(self.num_workers)
        except BaseException:
            self.close()
            raise

    def step(self, action: Any) -> TimeStep:
        """Applies ``action`` and returns the next batched time step (docs/architecture.rst,
        "One step of ``FastParallelEnvironment``").

        Raises:
            EnvironmentClosedError: after ``close()``.
            WorkerDiedError: a worker died (without a restart policy, or past its budget).
            EnvTimeoutError: ``timeout`` passed; only ``close()`` is left then.
            ConcurrentUseError: another thread is using the environment.
        """
        guard = self._guard
        if guard.refused:
            guard.check()
        if self._time_step is None:
            return self.reset()
        guard.enter("step()")
        try:
            rows = self._rows
            rows.write_action(action, self._check_action)
            slots = self._slots
            if slots.fresh_slots:
                self._step_around_fresh_slots()
            elif self._blocking:
                self._run_one_by_one(slots.slot_env, _STEP, "step")
            else:
                self._board.run(slots.slot_env, _STEP, 0, "step")
            time_step = rows.time_step()
            if self._has_spares:
                self._rotate_ended_slots(rows.step_types)
            elif self._background_resets and _has_last(rows.step_types):
                self._start_background_resets(rows.step_types)
        except (WorkerDiedError, EnvTimeoutError) as exc:
            guard.break_with(exc)  # as CallGuard.run: only close() is left
            raise
        finally:
            guard.leave()
        self._board.returned()
        self._time_step = time_step
        return time_step

    def reset(self) -> TimeStep:
        """Resets the slots' envs; returns their batched ``FIRST`` (raises as :meth:`step`)."""
        self._time_step = self._guard.run("reset()", self._reset_slots)
        return self._time_step

    # AlfEnvironment's hooks of the step() and reset() this class replaces.
    _step = step
    _reset = reset

    def current_time_step(self) -> Optional[TimeStep]:
        return self._time_step

    def _reset_slots(self) -> TimeStep:
        slots = self._slots
        slot_envs = list(slots.slot_env)
        pending = slots.fresh_slots if self._background_resets else {}
        if pending:  # those envs are resetting already: wait for that reset
            self._run([e for k, e in enumerate(slot_envs) if k not in pending], _RESET, "reset")
            self._board.wait_for([slot_envs[k] for k in pending], "reset")
        else:
            self._run(slot_envs, _RESET, "reset")
        if slots.spares:  # collected when one takes a slot
            self._board.post(list(slots.spares), _RESET)
        slots.fresh_slots.clear()
        time_step = self._rows.time_step()
        if self._has_spares:
            self._rotate_ended_slots(self._rows.step_types)
        elif self._background_resets and _has_last(self._rows.step_types):
            self._start_background_resets(self._rows.step_types)
        return time_step

    def _run(self, workers: List[int], job: JobType, during: str) -> None:
        if self._blocking:
            self._run_one_by_one(workers, job, during)
        else:
            self._board.run(workers, job, 0, during)

    def _run_one_by_one(self, workers: List[int], job: JobType, during: str) -> None:
        for w in workers:
            self._board.post([w], job)
            self._board.wait_for([w], during)

    def _step_around_fresh_slots(self) -> None:
        """Steps the slots' envs but the fresh slots', whose reset is waited for instead."""
        slots = self._slots
        fresh = slots.fresh_slots
        stepped = [e for k, e in enumerate(slots.slot_env) if k not in fresh]
        fresh_envs = [slots.slot_env[k] for k in fresh]
        fresh.clear()
        self._run(stepped, _STEP, "step")
        self._board.wait_for(fresh_envs, "reset")

    def _start_background_resets(self, step_types: np.ndarray) -> None:
        envs = np.flatnonzero(step_types == StepType.LAST).tolist()
        self._slots.fresh_slots.update(dict.fromkeys(envs))  # slot k is env k here
        self._board.post(envs, _RESET)

    def _rotate_ended_slots(self, step_types: np.ndarray) -> None:
        """Gives each slot whose env reported LAST the head spare (the ended env resets)."""
        ended = np.flatnonzero(step_types == StepType.LAST)
        if not len(ended):
            return
        old_envs = []
        for slot in ended.tolist():
            old, new = self._slots.swap(slot)
            self._slots.fresh_slots[slot] = new
            old_envs.append(old)
        self._board.post(old_envs, _RESET)
        self._rows.move_slots(self._slots.slot_env)

    def _restart_dead_worker(self, worker: int, death: BaseException, during: str) -> bool:
        """The board's death hook (a death during a pipe request raises, as ever)."""
        if (during == PIPE_CALL or not isinstance(death, WorkerDiedError)
                or not self._workers.restarts.allows(worker)):
            return False
        self._workers.restart(worker, death, self._rejoin)
        return True

    def _rejoin(self, worker: int, new: ProcessEnvironment) -> None:
        """Makes the new worker serve its slot (its port skips the abandoned job)."""
        time_step = new.reset(blocking=False)(self._workers.restarts.start_timeout)
        self._rows.write_worker_rows(worker, time_step)
        assert new.pid is not None  # started
        normal_scheduling([new.pid])  # as for the first workers
        join_job_loop(self._board, self._job_loop_specs[worker])

    @property
    def num_workers(self) -> int:
        """The number of worker processes."""
        return len(self._workers.envs)

    @property
    def envs(self) -> List[Any]:
        """One handle per env, spares included (a ``MemberProxy`` when workers host several)."""
        envs, g = self._workers.envs, self._group_size
        if g == 1:
            return envs
        return [MemberProxy(envs[i // g], i % g, i) for i in range(self._num_envs)]

    def _seed_all(self, seeds: List[int]) -> None:
        envs, g = self._workers.envs, self._group_size
        if g == 1:
            promises = [env.call("seed", s) for env, s in zip(envs, seeds)]
        else:
            promises = [env.call("seed_each", seeds[w * g:(w + 1) * g])
                        for w, env in enumerate(envs)]
        self._workers.resolve(promises, "seed")
        if self._background_resets and self._slots.fresh_slots:
            # A reset under way used the old seed: start it again.
            slot_env = self._slots.slot_env
            self._board.post([slot_env[k] for k in self._slots.fresh_slots], _RESET)

    def call_envs_with_same_args(self, name: str, *args: Any, **kwargs: Any) -> List[Any]:
        """Calls ``env.name(*args, **kwargs)`` in every env; returns their values."""
        if self._group_size == 1:
            return self._guard.run("a call", self._workers.request_all, f"call of {name!r}",
                                   lambda env: env.call(name, *args, **kwargs))
        groups = self._guard.run("a call", self._workers.request_all, f"call of {name!r}",
                                 lambda env: env.call("call_each", name, args, kwargs))
        return [value for group in groups for value in group]

    def timings(self) -> StepTimings:
        """Where the steps since the last call spent their time; starts counting again
        (docs/simulators.rst, "Where each step's time goes")."""
        return StepTimings(self._env_figures(),
                           *batch_figures(self._board.controller.take_timings()))

    def _close(self) -> None:
        self._guard.close()
        board: Optional[JobBoard] = getattr(self, "_board", None)  # unset if never made
        if board is not None:
            board.release()
        self._workers.close()
        # The controller holds a pidfd per worker, the block and its views the
        # region's descriptor: released now, not when this object is collected.
        if board is not None:
            del self._board
        self._job_loop_specs = []  # they hold the block too
        rows: Optional[SlotRows] = getattr(self, "_rows", None)
        if rows is not None:
            rows.close()


class SlotRows:
    """The trainer's side of the shared block, in slot order: the action rows it writes and
    the time-step rows it reads (views of them with ``zero_copy``)."""

    def __init__(self, specs: BatchSpecs, num_workers: int, slot_env: List[int],
                 zero_copy: bool) -> None:
        b = self._b = specs.batch_size
        fields = [(f"{prefix}.{path}", tuple(leaf.shape), leaf.numpy_dtype)
                  for prefix, spec in (("action", specs.action), ("time_step", specs.time_step))
                  for path, leaf in nest.flatten_with_path(spec)]
        names = [name for name, _, _ in fields]
        # For the workers' row handlers.
        self.action_names = tuple(n for n in names if n.startswith("action."))
        self.time_step_names = tuple(n for n in names if n.startswith("time_step."))
        self.block = SharedBlock(fields, num_rows=num_workers * b, num_workers=num_workers)
        views = self.block.views
        self._action_views = [views[n] for n in self.action_names]
        self._time_step_views = [views[n] for n in self.time_step_names]
        # env_id is the slots' ids (spares move envs), not read from the rows.
        self._env_id_leaf = self.time_step_names.index("time_step.env_id")
        self._fields = [v for i, v in enumerate(self._time_step_views) if i != self._env_id_leaf]
        self._step_type_leaf = [n for n in self.time_step_names
                                if n != "time_step.env_id"].index("time_step.step_type")
        batch = len(slot_env) * b
        self._action_heads = [v[:batch] for v in self._action_views]
        self._heads = [v[:batch] for v in self._fields]
        self._env_ids = np.arange(batch, dtype=np.int32)
        self._pack: Callable[[List[Any]], TimeStep] = compile_nest(specs.time_step)[1]
        self._zero_copy = zero_copy
        #: Each slot's step type at the last :meth:`time_step` (a view with ``zero_copy``).
        self.step_types = np.zeros(0, np.int32)
        self.move_slots(slot_env)

    def move_slots(self, slot_env: List[int]) -> None:
        """Slot ``k`` uses the rows of env ``slot_env[k]`` from now on."""
        b = self._b
        rows = np.concatenate([np.arange(e * b, (e + 1) * b) for e in slot_env])
        self._slot_rows = rows
        self._identity = bool((rows == self._env_ids).all())

    def write_action(self, action: Any, check: ActionChecker) -> None:
        """Checks ``action`` with ``check`` and writes it into the slots' rows (one
        native copy when it is one array of exactly the rows' shape and dtype)."""
        if self._identity:
            array = check.single_array(action)
            if array is not None and copy_leaves(self._action_heads, (array,)) == 1:
                return
        self.write_actions(check.flat(action))

    def write_actions(self, flat_action: List[np.ndarray]) -> None:
        """Writes the leaves of a checked action (one row per slot) into the slots' rows."""
        if self._identity:
            for head, leaf in zip(self._action_heads, flat_action):
                head[...] = leaf
        else:
            rows = self._slot_rows
            for view, leaf in zip(self._action_views, flat_action):
                view[rows] = leaf

    def time_step(self) -> TimeStep:
        """The slots' time steps as one batched ``TimeStep`` of torch tensors, whose
        ``env_id`` is the slot's row; keeps their step types in :attr:`step_types`."""
        if self._identity:
            leaves = self._heads
            if not self._zero_copy:
                leaves = [np.array(v) for v in leaves]
        else:
            rows = self._slot_rows
            leaves = [v[rows] for v in self._fields]  # fancy index: a copy
        self.step_types = leaves[self._step_type_leaf]
        tensors = [torch.from_numpy(x) for x in leaves]
        tensors.insert(self._env_id_leaf, torch.from_numpy(self._env_ids.copy()))
        return self._pack(tensors)

    def write_worker_rows(self, worker: int, time_step: TimeStep) -> None:
        """Writes a restarted worker's ``FIRST`` time step into all its rows."""
        b = self._b
        rows = slice(worker * b, (worker + 1) * b)
        for view, leaf in zip(self._time_step_views, nest.flatten(time_step)):
            view[rows] = np.asarray(leaf).reshape(view[rows].shape)

    def close(self) -> None:
        """Drops the views and the block (the region goes once the workers are gone)."""
        self.block.close()
        self._action_views, self._time_step_views = [], []
        self._action_heads, self._fields, self._heads = [], [], []
        self.step_types = np.zeros(0, np.int32)


_LAST_BYTES = np.array(StepType.LAST, np.int32).tobytes()


def _has_last(step_types: np.ndarray) -> bool:
    """Whether an entry of ``step_types`` is ``LAST``: a search of the bytes, a
    seventh of the cost of a numpy comparison (asked after every step)."""
    if step_types.dtype != np.int32:
        return bool((step_types == StepType.LAST).any())
    data = step_types.tobytes()
    at = data.find(_LAST_BYTES)
    while at > 0 and at % len(_LAST_BYTES):
        at = data.find(_LAST_BYTES, at + 1)
    return at >= 0


def plan_group_size(num_envs: int, num_workers: Optional[int], num_spares: int,
                    blocking: bool) -> int:
    """How many envs each worker hosts (``num_workers``: docs/options.rst); raises
    ``ValueError`` for a ``num_workers`` that does not fit."""
    if num_envs < 1:
        return 1  # ParallelAlfEnvironment names the empty env_constructors
    if num_workers is not None:
        w = int(num_workers)
        if not 1 <= w <= num_envs or num_envs % w:
            raise ValueError(f"num_workers: expected a divisor of the number of envs "
                             f"({num_envs}), got {num_workers}")
        if w < num_envs and (num_spares or blocking):
            what = f"num_spare_envs_for_reload={num_spares}" if num_spares else "blocking"
            raise ValueError(f"num_workers: {what} needs one env per worker; got "
                             f"num_workers={w} for {num_envs} envs")
        return num_envs // w
    if num_spares or blocking:
        return 1
    cpus = usable_cpu_count()
    divisors = [d for d in range(1, num_envs + 1) if num_envs % d == 0]
    workers = max(d for d in divisors if d <= cpus)
    if 2 * workers <= cpus and workers < num_envs:
        workers = min(d for d in divisors if d >= cpus)
    return num_envs // workers
