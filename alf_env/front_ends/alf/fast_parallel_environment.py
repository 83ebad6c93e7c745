"""Batched environments in worker processes, stepped through shared memory.

:class:`FastParallelEnvironment` has the arguments and the results of
:class:`~alf_env.environments.parallel_environment.ParallelAlfEnvironment` (the
reference path it is tested against, value by value) but moves steps and resets
out of the pipes: a ``SharedBlock`` holds, for every leaf of the flattened
action and time step specs, the rows of every env, and the pipe keeps what has
no fixed size (spec queries, ``seed``, ``render``, any ``call``, errors). By
default a worker hosts an :class:`~alf_env.front_ends.alf.env_group.EnvGroup` of
consecutive envs. The design: ``docs/architecture.rst`` ("Data plane", "Front
ends").

An env's error is raised once every worker has finished the job, so no job is
left running; a dead worker is noticed by the native wait (pidfds) within
~50 ms. What each fault raises and the bound on ``close()``:
``docs/reliability.md`` ("Fault table").
"""

import functools
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from alf_env import nest
from alf_env.control_plane.affinity import AUTO, WorkerCpus, normal_scheduling, usable_cpu_count
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RestartPolicy
from alf_env.control_plane.step_timings import StepTimings, batch_figures
from alf_env.control_plane.torch_threads import advise_torch_threads
from alf_env.data_plane.job_board import PIPE_CALL, JobBoard
from alf_env.data_plane.job_loop import FastLoopSpec, join_job_loop, start_job_loops
from alf_env.data_structures import StepType, TimeStep
from alf_env.errors import WorkerDiedError
from alf_env.front_ends.alf.alf_rows import AlfRowsHandler
from alf_env.front_ends.alf.env_group import EnvGroup, MemberProxy
from alf_env.front_ends.alf.parallel_environment import ParallelAlfEnvironment
from alf_env.nest_compiled import compile_nest

try:
    from alf_env import _penv
    from alf_env.data_plane.shared_block import SharedBlock
except ImportError as _err:  # pragma: no cover - the package always builds it
    raise ImportError(
        "alf_env._penv (the native module) is not built; reinstall alf_env with "
        "`pip install -e .` (needs a C++17 compiler)") from _err


class FastParallelEnvironment(ParallelAlfEnvironment):
    """Like ``ParallelAlfEnvironment``, with steps and resets through shared memory.

    What each argument does and when to change it: ``docs/options.rst`` ("ALF
    front ends").

    Args:
        env_constructors: one constructor per env, spares included.
        start_serially: start the workers one after another (``False`` also builds
            a worker's envs side by side, each in a thread).
        blocking: step the envs one after another (for debugging).
        flatten: as for ``ParallelAlfEnvironment``.
        num_spare_envs_for_reload: spares that take the slot of an env that resets.
        torch_num_threads_per_env: ``torch.set_num_threads`` in each worker.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``.
        zero_copy: return views of the shared rows, valid until the next step
            (no spares; turns off the background resets, which would overwrite them).
        spin_us: how long a waiter spins before it sleeps (-1 adaptive, 0 never).
        timeout: seconds each reset, step and call may wait for the workers; then
            ``EnvTimeoutError``, and the environment can only be closed.
        worker_cpus: ``"auto"``, ``None`` (the OS decides), ``"spread"`` or CPU ids.
        num_workers: worker processes, dividing the number of envs (default: about
            one per usable CPU; one per env with spares or ``blocking``).
        restart_policy: a :class:`~alf_env.control_plane.restart.RestartPolicy`:
            a worker that dies during a step or reset is started again (same
            job slot and rows) and each of its slots returns the ``FIRST`` step
            of a new episode (``docs/contract.rst``, "Restarts"). ``None``: a
            death raises ``WorkerDiedError``.

    Raises:
        ValueError: ``zero_copy`` with spares, or a ``num_workers`` that does not fit
            (:func:`plan_group_size`).
    """

    _FAST = True

    def __init__(self, env_constructors: Sequence[Callable[..., Any]],
                 start_serially: bool = True, blocking: bool = False,
                 flatten: bool = True, num_spare_envs_for_reload: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1,
                 start_method: str = "fork", *, zero_copy: bool = False,
                 spin_us: int = -1, timeout: Optional[float] = None,
                 worker_cpus: WorkerCpus = AUTO, num_workers: Optional[int] = None,
                 restart_policy: Optional[RestartPolicy] = None) -> None:
        if zero_copy and num_spare_envs_for_reload:
            raise ValueError("zero_copy: views need each slot to keep its env; got "
                             f"num_spare_envs_for_reload={num_spare_envs_for_reload}; "
                             "use zero_copy=False with spares")
        self._controller: Optional[_penv.Controller] = None
        env_constructors = list(env_constructors)
        self._num_all_envs = len(env_constructors)
        self._group_size = plan_group_size(len(env_constructors), num_workers,
                                           num_spare_envs_for_reload, blocking)
        if self._group_size > 1:
            g = self._group_size
            # start_serially=False: the workers start at once, and each builds
            # its members at once too (as one process per env would).
            env_constructors = [
                functools.partial(EnvGroup, env_constructors[begin:begin + g], begin,
                                  build_concurrently=not start_serially)
                for begin in range(0, self._num_all_envs, g)]
        super().__init__(env_constructors, start_serially=start_serially,
                         blocking=blocking, flatten=flatten,
                         num_spare_envs_for_reload=num_spare_envs_for_reload,
                         torch_num_threads_per_env=torch_num_threads_per_env,
                         start_method=start_method, timeout=timeout,
                         worker_cpus=worker_cpus, restart_policy=restart_policy)
        self._zero_copy = zero_copy
        if zero_copy:
            self._background_resets = False
        try:
            self._attach_workers(spin_us)
            normal_scheduling([env.pid for env in self._envs if env.pid is not None])
            advise_torch_threads(self.num_workers)
        except BaseException:
            self.close()
            raise

    # -- several envs per worker -----------------------------------------------

    def _worker_env_id(self, worker: int) -> int:
        return worker * self._group_size

    @property
    def num_workers(self) -> int:
        """The number of worker processes."""
        return len(self._envs)

    @property
    def envs(self) -> List[Any]:
        """One handle per env, spares included: its ``ProcessEnvironment``, or a
        ``MemberProxy`` when workers host several envs (used the same way)."""
        if self._group_size == 1:
            return self._envs
        g = self._group_size
        return [MemberProxy(self._envs[i // g], i % g, i) for i in range(self._num_all_envs)]

    def seed(self, seeds: Sequence[int]) -> None:
        """Seeds env ``i`` with ``seeds[i]`` (one seed per env, spares included)."""
        if self._group_size == 1:
            return super().seed(seeds)
        self._check_usable()
        seeds, g = list(seeds), self._group_size
        if len(seeds) != self._num_all_envs:
            raise ValueError(f"seeds: expected {self._num_all_envs} seeds (one per env), "
                             f"got {len(seeds)}")
        self._guarded(lambda: self._resolve(
            [env.call("seed_each", seeds[w * g:(w + 1) * g])
             for w, env in enumerate(self._envs)], "seed"))

    def call_envs_with_same_args(self, name: str, *args: Any, **kwargs: Any) -> List[Any]:
        """Calls ``env.name(*args, **kwargs)`` in every env; returns their values."""
        if self._group_size == 1:
            return super().call_envs_with_same_args(name, *args, **kwargs)
        self._check_usable()
        groups = self._guarded(lambda: self._resolve(
            [env.call("call_each", name, args, kwargs) for env in self._envs],
            f"call of {name!r}"))
        return [value for group in groups for value in group]

    def timings(self) -> StepTimings:
        """Where the steps since the last call spent their time; starts counting again.

        Per env (each member of a worker's group, spares included), its own
        ``step`` time in its worker; per lockstep step (the stepped workers
        posted together while no other job runs), the wait, the straggler
        spread and the hand-off overhead, from the workers' job slots. A step
        posted while a spare still resets is no lockstep step (per-env figures
        only); in ``blocking`` mode each worker's step is a batch of its own.
        Costs one pipe call per worker now, nothing per step
        (docs/simulators.rst, "Where each step's time goes").
        """
        self._check_usable()
        envs = self._env_timings()
        assert self._controller is not None  # set while open
        wait, spread, handoff = batch_figures(self._controller.take_timings())
        return StepTimings(envs, wait, spread, handoff)

    def _attach_workers(self, spin_us: int) -> None:
        b = self._env_batch_size
        fields: List[Tuple[str, Tuple[int, ...], np.dtype]] = []
        action_names: List[str] = []
        time_step_names: List[str] = []
        for prefix, spec, names in (("action", self._action_spec, action_names),
                                    ("time_step", self._time_step_spec, time_step_names)):
            for path, leaf in nest.flatten_with_path(spec):
                name = f"{prefix}.{path}"
                fields.append((name, tuple(leaf.shape), leaf.numpy_dtype))
                names.append(name)
        num_envs = len(self._envs)
        self._block = SharedBlock(fields, num_rows=num_envs * b, num_workers=num_envs)
        self._action_views = [self._block.views[n] for n in action_names]
        time_step_views = [self._block.views[n] for n in time_step_names]
        self._time_step_views = time_step_views  # a restarted worker's FIRST step
        # The common case (no spares moved, slot k = env k) reads and writes
        # the first batch_size rows: those views are made once, here.
        batch = len(self._slots.slot_env) * b
        self._action_heads = [v[:batch] for v in self._action_views]
        # The env_id leaf is replaced by the slots' ids (spares move envs):
        # _finish_fast reads every other leaf (these lists leave it out).
        self._env_id_leaf = time_step_names.index("time_step.env_id")
        self._time_step_fields = [v for i, v in enumerate(time_step_views)
                                  if i != self._env_id_leaf]
        self._time_step_heads = [v[:batch] for v in self._time_step_fields]
        self._step_type_index = [n for n in time_step_names
                                 if n != "time_step.env_id"].index("time_step.step_type")
        self._step_type_view = self._block.views["time_step.step_type"]
        self._pack_time_step = compile_nest(self._time_step_spec)[1]
        self._controller = self._block.controller(spin_us,
                                                  workers_spread=self._workers_spread)
        self._board = JobBoard(self._controller, self._envs, timeout=self._timeout)
        handlers = [AlfRowsHandler((i * b, (i + 1) * b), tuple(action_names),
                                   tuple(time_step_names), grouped=self._group_size > 1)
                    for i in range(num_envs)]
        start_job_loops(self._board, self._block, spin_us, self._workers_spread, handlers)
        self._job_loop_specs: List[FastLoopSpec] = []
        if self._restarts.enabled:
            # What a restarted worker needs to join its slot (see _rejoin).
            self._job_loop_specs = [FastLoopSpec(self._block, w, spin_us, handler,
                                                 self._workers_spread)
                                    for w, handler in enumerate(handlers)]
            self._board.set_death_hook(self._restart_fast)
        self._update_slot_rows()

    # -- jobs (see data_plane.job_board.JobBoard) ---------------------------

    def _post(self, workers: Iterable[int], job: Any) -> None:
        """Posts ``job`` to ``workers``, first finishing any job they still run."""
        self._board.post(workers, job)

    def _wait_for(self, workers: Iterable[int], during: str) -> None:
        """Waits until each of ``workers`` finished; raises what one raised."""
        self._board.wait_for(workers, during)

    # -- restarts (restart_policy) --------------------------------------------

    def _restart_fast(self, worker: int, death: BaseException, during: str) -> bool:
        """The board's death hook: restarts ``worker`` if the policy allows (not
        for a death during a pipe request, which raises as without a policy)."""
        if (during == PIPE_CALL or not isinstance(death, WorkerDiedError)
                or not self._restarts.allows(worker)):
            return False
        self._restart_worker(worker, death)
        return True

    def _rejoin(self, worker: int, new: ProcessEnvironment) -> None:
        """Resets the new worker's envs over its pipe, writes their ``FIRST`` time
        step into its rows, and sends it into the job loop of its slot (whose
        abandoned job its port skips)."""
        time_step = new.reset(blocking=False)(self._restarts.start_timeout)
        b = self._env_batch_size
        rows = slice(worker * b, (worker + 1) * b)
        for view, leaf in zip(self._time_step_views, nest.flatten(time_step)):
            view[rows] = np.asarray(leaf).reshape(view[rows].shape)
        assert new.pid is not None  # started
        normal_scheduling([new.pid])  # as for the first workers
        join_job_loop(self._board, self._job_loop_specs[worker])

    # -- stepping ------------------------------------------------------------

    def _update_slot_rows(self) -> None:
        b = self._env_batch_size
        rows = np.concatenate([np.arange(e * b, (e + 1) * b) for e in self._slots.slot_env])
        self._slot_rows = rows
        self._identity_rows = bool((rows == np.arange(self._batch_size)).all())

    def _run(self, workers: List[int], job: Any, during: str) -> None:
        if self._blocking:
            for w in workers:
                self._post([w], job)
                self._wait_for([w], during)
        else:
            self._board.run(workers, job, 0, during)  # post and wait in one go

    def _restart_background_resets(self) -> None:
        """Resets again the envs whose background reset is under way."""
        slot_env = self._slots.slot_env
        self._post([slot_env[k] for k in self._slots.fresh_slots], _penv.JobType.RESET)

    def _do_reset(self) -> TimeStep:
        slot_envs = list(self._slots.slot_env)
        pending = self._background_pending()
        if pending:  # those envs are resetting already: wait for that reset
            self._run([e for k, e in enumerate(slot_envs) if k not in pending],
                      _penv.JobType.RESET, "reset")
            self._wait_for([slot_envs[k] for k in pending], "reset")
        else:
            self._run(slot_envs, _penv.JobType.RESET, "reset")
        spares = list(self._slots.spares)
        if spares:  # spares reset in the background; collected when needed
            self._post(spares, _penv.JobType.RESET)
        self._slots.fresh_slots.clear()
        return self._finish_fast()

    def _do_step(self, action: Any) -> TimeStep:
        time_step = self._step_rows(action)
        self._board.returned()
        return time_step

    def _step_rows(self, action: Any) -> TimeStep:
        flat_action = self._check_action.flat(action)
        fresh = self._slots.fresh_slots
        slot_env = self._slots.slot_env
        if self._identity_rows:
            for head, leaf in zip(self._action_heads, flat_action):
                head[...] = leaf
        else:
            rows = self._slot_rows
            for view, leaf in zip(self._action_views, flat_action):
                view[rows] = leaf
        if not fresh:  # the common case: every slot's env steps
            self._run(slot_env, _penv.JobType.STEP, "step")
            return self._finish_fast()
        stepped = [e for k, e in enumerate(slot_env) if k not in fresh]
        # A fresh slot shows the FIRST step its new env wrote when it reset.
        fresh_envs = [slot_env[k] for k in fresh]
        fresh.clear()
        self._run(stepped, _penv.JobType.STEP, "step")
        self._wait_for(fresh_envs, "reset")
        return self._finish_fast()

    def _finish_fast(self) -> TimeStep:
        rows = self._slot_rows
        # Every leaf but env_id, which is the slots' ids (spares move envs).
        if self._identity_rows:
            leaves = self._time_step_heads
            if not self._zero_copy:
                leaves = [np.array(v) for v in leaves]
        else:
            leaves = [v[rows] for v in self._time_step_fields]  # fancy index: a copy
        tensors = [torch.from_numpy(x) for x in leaves]
        tensors.insert(self._env_id_leaf, torch.from_numpy(self._env_ids.copy()))
        time_step = self._pack_time_step(tensors)
        if self._slots.has_spares:
            self._rotate_ended_slots(leaves_step_type=self._step_type_view[rows])
        elif self._background_resets:
            # Read from the copies made above, before a reset overwrites the rows.
            self._start_background_resets(leaves[self._step_type_index])
        return time_step

    def _start_background_resets(self, step_types: np.ndarray) -> None:
        """Posts a RESET to each env that just reported LAST (row = slot = env)."""
        if not _has_last(step_types):
            return
        ended = np.flatnonzero(step_types == StepType.LAST)
        envs = ended.tolist()
        self._slots.fresh_slots.update(dict.fromkeys(envs))  # slot k is env k here
        self._post(envs, _penv.JobType.RESET)

    def _rotate_ended_slots(self, leaves_step_type: np.ndarray) -> None:
        ended = np.flatnonzero(leaves_step_type == StepType.LAST)
        if not len(ended):
            return
        old_envs = []
        for slot in ended:
            old, new = self._slots.swap(int(slot))
            self._slots.fresh_slots[int(slot)] = new
            old_envs.append(old)
        self._post(old_envs, _penv.JobType.RESET)
        self._update_slot_rows()

    # -- shutdown ------------------------------------------------------------

    def _close(self) -> None:
        if self._controller is not None:
            self._board.release()
        super()._close()
        # The controller holds a pidfd per worker, the block and its views the
        # region's descriptor: released now, not when this object is collected.
        # (Typed as when open: nothing reads them once the env is closed.)
        self._board = self._controller = None  # type: ignore[assignment]
        if hasattr(self, "_block"):
            self._block.close()
        self._action_views = self._action_heads = None  # type: ignore[assignment]
        self._time_step_fields = self._time_step_heads = None  # type: ignore[assignment]
        self._time_step_views = None  # type: ignore[assignment]
        self._job_loop_specs = []  # they hold the block too
        self._step_type_view = None  # type: ignore[assignment]


_LAST_BYTES = np.array(StepType.LAST, np.int32).tobytes()


def _has_last(step_types: np.ndarray) -> bool:
    """Whether an entry of the int32 ``step_types`` is ``LAST``: a search of the
    bytes, a seventh of the cost of a numpy comparison (asked after every step)."""
    if step_types.dtype != np.int32:
        return bool((step_types == StepType.LAST).any())
    data = step_types.tobytes()
    at = data.find(_LAST_BYTES)
    while at > 0 and at % len(_LAST_BYTES):
        at = data.find(_LAST_BYTES, at + 1)
    return at >= 0


def plan_group_size(num_envs: int, num_workers: Optional[int], num_spares: int,
                    blocking: bool) -> int:
    """How many envs each worker of a FastParallelEnvironment hosts (``num_workers``:
    ``docs/options.rst``); spares and ``blocking`` need one env per worker.

    Raises:
        ValueError: ``num_workers`` out of range, not dividing the number of
            envs, or fewer workers than envs with spares or ``blocking``.
    """
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
