"""``FastVectorEnv``: gymnasium's vector API over alf_env's shared-memory workers.

The options and modes: ``docs/options.rst`` ("gymnasium front end"); the objects
it is composed of and how a step runs through them: ``docs/architecture.rst``
("One step of FastVectorEnv").
"""

import functools
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium.error import AlreadyPendingCallError
from gymnasium.vector import AutoresetMode

from alf_env.control_plane.affinity import (
    AUTO,
    WorkerCpus,
    pin_workers,
    pinned_cpus,
    pinned_when_quiet,
    plan_worker_cpus,
)
from alf_env.control_plane.channel import Promise
from alf_env.control_plane.guards import NotCopyable, OneThread, guard_methods
from alf_env.control_plane.launch import close_all, start_environments
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RestartBudget, RestartPolicy
from alf_env.control_plane.shutdown import close_when_collected
from alf_env.control_plane.step_timings import (
    STEP_TIMINGS_CALL,
    StepTimings,
    batch_figures,
    env_figures,
    no_figure,
)
from alf_env.control_plane.torch_threads import advise_torch_threads
from alf_env.data_plane.job_board import Board, JobBoard
from alf_env.data_plane.shared_block import SPIN_ADAPTIVE, SharedBlock
from alf_env.errors import EnvTimeoutError
from alf_env.front_ends.gym.engine import JobEngine
from alf_env.front_ends.gym.gym_rows import RESERVED_CALL_NAMES, EnvCall
from alf_env.front_ends.gym.info_codec import DEFAULT_INFO_BYTES
from alf_env.front_ends.gym.restarts import WorkerRestarter
from alf_env.front_ends.gym.startup import (
    ObservationMode,
    attach_workers,
    check_arguments,
    declared_infos,
    describe_workers,
    make_worker,
    plan_workers,
    resolve_context,
)
from alf_env.front_ends.gym.state import AsyncState, CallState, Seeds, Step, VectorApi

__all__ = ["FastVectorEnv"]


class FastVectorEnv(NotCopyable, VectorApi, gym.vector.VectorEnv):
    """A gymnasium vector env whose envs run in worker processes, stepped through shared memory.

    ``AsyncVectorEnv``'s arguments come first, in its order; alf_env's own are
    keyword-only. What each argument but ``env_fns`` does and when to change it:
    ``docs/options.rst`` ("gymnasium front end").

    Args:
        env_fns: one constructor per env (called in the workers).

    Raises:
        TypeError: ``worker`` given, or a malformed ``observation_mode`` pair.
        ValueError: bad arguments.
        RuntimeError: the envs' action spaces differ, or their observation
            spaces do not fit ``observation_mode`` (naming the env and the spaces).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], shared_memory: bool = True,
                 copy: bool = True, context: Optional[str] = "fork", daemon: bool = True,
                 worker: Optional[Callable[..., None]] = None,
                 observation_mode: ObservationMode = "same",
                 autoreset_mode: Union[AutoresetMode, str] = AutoresetMode.NEXT_STEP,
                 max_concurrency: Optional[int] = None, *,
                 batch_size: Optional[int] = None, num_workers: Optional[int] = None,
                 envs_per_worker: Optional[int] = None, spin_us: int = SPIN_ADAPTIVE,
                 worker_cpus: WorkerCpus = AUTO, info_bytes: int = DEFAULT_INFO_BYTES,
                 info_example: Union[None, Dict[str, Any], Sequence[Dict[str, Any]]] = None,
                 batch_infos: bool = True, restart_policy: Optional[RestartPolicy] = None) -> None:
        self._one_thread = OneThread(type(self).__name__)  # see guard_methods below
        env_fns = list(env_fns)
        batch_size = len(env_fns) if batch_size is None else int(batch_size)
        autoreset_mode = AutoresetMode(autoreset_mode)
        context = resolve_context(context)
        max_concurrency = check_arguments(env_fns, batch_size, autoreset_mode, worker,
                                          observation_mode, max_concurrency, batch_infos)
        self._bounds = plan_workers(len(env_fns), batch_size, num_workers, envs_per_worker,
                                    max_concurrency)
        budget = RestartBudget(restart_policy, len(self._bounds))
        self.restart_policy = restart_policy
        declared, info_bytes = declared_infos(info_example, info_bytes)
        cpu_plan = plan_worker_cpus(worker_cpus, len(self._bounds),
                                    lockstep=batch_size == len(env_fns))
        self.env_fns = env_fns
        self.num_envs = len(env_fns)
        self.batch_size = batch_size
        sizes = {end - begin for begin, end in self._bounds}
        # None when the workers hold different numbers of envs.
        self.envs_per_worker: Optional[int] = sizes.pop() if len(sizes) == 1 else None
        self.num_workers = len(self._bounds)
        self.info_bytes = info_bytes
        self.batch_infos = bool(batch_infos)
        self.copy = copy
        self.autoreset_mode = autoreset_mode
        self.context = context
        self.daemon = daemon
        self.observation_mode = observation_mode
        self.max_concurrency = max_concurrency
        self.is_async = self.batch_size < self.num_envs
        self._calls = CallState(type(self).__name__, self.num_envs, self.is_async)
        self._reset_rows: List[int] = []         # envs whose infos reset_wait returns
        self._pending_calls: List[Promise] = []
        self._workers: List[ProcessEnvironment] = []
        self._block: Optional[SharedBlock] = None
        self._board: Optional[Board] = None
        self._finalizer: Optional["weakref.finalize[..., None]"] = None
        self._restarter: Optional[WorkerRestarter] = None
        new_worker = functools.partial(make_worker, env_fns, self._bounds,
                                       autoreset_mode=autoreset_mode, context=context,
                                       daemon=daemon)
        try:
            workers = [new_worker(w) for w in range(self.num_workers)]
            start_environments(workers, start_serially=False)  # closes them if it fails
            self._workers = workers
            # Dropped unclosed, the env is collected (nothing refers back to it): this ends them.
            self._finalizer = close_when_collected(self, self._workers)
            pin_workers(self.worker_pids(), pinned_cpus(worker_cpus, cpu_plan))
            spaces = describe_workers(self._workers, observation_mode, batch_size, autoreset_mode)
            (self.single_observation_space, self.observation_space, self.single_action_space,
             self.action_space, self.metadata, self.render_mode, each_env) = spaces
            transport = attach_workers(
                self._workers, spaces, self._bounds, shared_memory=bool(shared_memory),
                autoreset_mode=autoreset_mode, copy=copy, info_bytes=info_bytes,
                declared_infos=declared, spin_us=spin_us, workers_spread=cpu_plan is not None,
                batch_infos=batch_infos, pin_when_quiet=pinned_when_quiet(worker_cpus, cpu_plan))
            self.shared_memory = transport.block is not None
            self._block, self._board = transport.block, transport.board
            self._results = transport.results
            self._engine = JobEngine(self._calls, transport, self._workers, self._bounds,
                                     batch_size, self.envs_per_worker)
            if budget.enabled:
                # The board holds the hook weakly; the hook's rejoin holds the board.
                self._restarter = WorkerRestarter(
                    budget, self._workers, self._bounds, new_worker, each_env,
                    transport.rejoin, transport.results, pinned_cpus(worker_cpus, cpu_plan))
                transport.board.set_death_hook(self._restarter.restart)
            advise_torch_threads(self.num_workers)
        except BaseException:
            self.close(terminate=True)
            raise
        # Still referenced at exit: control_plane.shutdown's exit hook closes the
        # workers (the board is registered) with every other worker, all at once.

    def reset_async(self, seed: Seeds = None, options: Optional[Dict[str, Any]] = None) -> None:
        seeds, options, mask = self._calls.reset_arguments(seed, options)
        self._reset_rows = (list(range(self.num_envs)) if mask is None
                            else np.flatnonzero(mask).tolist())
        staged = seed is not None or options is not None or mask is not None
        self._engine.reset(mask, (seeds, options) if staged else None)
        self._calls.pending = AsyncState.WAITING_RESET

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        self._calls.check_waiting(AsyncState.WAITING_RESET, "reset_wait", "reset_async")
        if self.is_async:
            obs, _, _, _, infos = self._engine.receive(timeout)
            return obs, infos
        self._engine.wait_all("reset", timeout)
        return self._results.gather_all(self._reset_rows)

    def step(self, actions: Any) -> Step:
        """Steps the envs (asynchronous mode: those of the last ``recv``) as
        :meth:`step_async` and :meth:`step_wait` do, in one call."""
        if self.is_async or self._engine.in_flight or self._calls.pending is not \
                AsyncState.DEFAULT:
            self.step_async(actions)  # raises what the state machine says
            return self.step_wait()
        self._calls.check_running()
        self._engine.step_all(actions)
        step = self._results.step_results()
        self._engine.returned()
        return step

    def step_async(self, actions: Any) -> None:
        """Checks and writes the actions (each env gets its item as ``AsyncVectorEnv``
        sends it), posts the steps; collect with :meth:`step_wait`.

        Raises:
            TypeError: ``actions`` cannot be iterated over (e.g. ``step(0)``).
            ValueError: a malformed action (naming the field, the env at fault,
                the expected and actual shape and dtype); nothing was sent.
        """
        self._calls.check_ready("step_async")
        received = self._engine.last_received
        if self.is_async and received is None:
            raise self._calls.no_recv_yet()
        if not self.is_async and self._engine.in_flight:
            raise AlreadyPendingCallError(
                f"step_async: workers {sorted(self._engine.in_flight)} still run jobs of "
                f"send()/async_reset(); recv() them first", "step")
        self._engine.send(actions, None, received if self.is_async else None)
        self._calls.pending = AsyncState.WAITING_STEP

    def step_wait(self, timeout: Optional[float] = None) -> Step:
        self._calls.check_waiting(AsyncState.WAITING_STEP, "step_wait", "step_async")
        if self.is_async:
            return self._engine.receive(timeout)
        self._engine.wait_all("step", timeout)
        return self._results.step_results()

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        self._calls.check_running()
        if name in RESERVED_CALL_NAMES:
            raise ValueError(f"call({name!r}): use FastVectorEnv.{name}() instead")
        self._calls.check_idle("call_async")
        self._engine.settle()
        # Each worker reads its request and runs it; they run side by side.
        self._pending_calls = self._calls.guard(lambda: [
            w.call("call_each", name, args, kwargs) for w in self._workers])
        self._calls.pending = AsyncState.WAITING_CALL

    def call_wait(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        self._calls.check_waiting(AsyncState.WAITING_CALL, "call_wait", "call_async")
        try:
            groups = self._calls.resolve(self._pending_calls, timeout, "call")
        except EnvTimeoutError:
            raise  # nothing was used up: the call stays pending
        except BaseException:
            self._pending_calls = []
            self._calls.pending = AsyncState.DEFAULT
            raise
        self._pending_calls = []
        self._calls.pending = AsyncState.DEFAULT
        return tuple(value for group in groups for value in group)

    def set_attr(self, name: str, values: Any) -> None:
        """Sets attribute ``name`` of every env: one value per env (a list or tuple), or one."""
        values = self._calls.attr_values(name, values)
        self._engine.settle()
        self._calls.resolve([w.call("set_each", name, list(values[begin:end]))
                             for w, (begin, end) in zip(self._workers, self._bounds)], None)

    def call_envs(self, name: str, calls: Mapping[int, EnvCall]) -> Dict[int, Any]:
        """Calls ``name`` of some envs, each with its own arguments: ``calls`` is
        ``{env_id: (args, kwargs)}``; returns ``{env_id: what its call returned}``.

        Only their workers get a request, so a large argument crosses one pipe.

        Raises:
            ValueError: an env id out of ``[0, num_envs)``, or ``step``,
                ``reset`` or ``close`` as ``name``; nothing was sent.
        """
        self._calls.check_running()
        bad = sorted(i for i in calls if not 0 <= i < self.num_envs)
        if bad:
            raise ValueError(f"call_envs({name!r}): expected env ids in [0, {self.num_envs}), "
                             f"got {bad}")
        if name in RESERVED_CALL_NAMES:
            raise ValueError(f"call_envs({name!r}): use {type(self).__name__}.{name}() instead")
        self._calls.check_idle("call_envs")
        return self._engine.call_some(name, calls)

    @property
    def np_random_seed(self) -> Tuple[Any, ...]:  # type: ignore[override]  # AsyncVectorEnv's
        """The ``np_random_seed`` of every env (as gymnasium's vector envs give it)."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # read-only, as AsyncVectorEnv's
    def np_random(self) -> Tuple[np.random.Generator, ...]:  # type: ignore[override]  # same
        """The numpy generator of every env (copies: they live in the workers)."""
        return self.get_attr("np_random")

    def worker_pids(self) -> List[int]:
        """The pids of the worker processes (for monitoring and CPU pinning)."""
        return [w.pid for w in self._workers if w.pid is not None]

    def timings(self) -> StepTimings:
        """Where the steps since the last call spent their time (``print`` it for a table);
        starts counting again. docs/simulators.rst ("Where each step's time goes")."""
        self._calls.check_ready("timings")
        self._engine.settle()
        readings = self._calls.resolve([w.call(STEP_TIMINGS_CALL) for w in self._workers], None)
        if isinstance(self._board, JobBoard):
            wait, spread, handoff = batch_figures(self._board.controller.take_timings())
            return StepTimings(env_figures(readings), wait, spread, handoff)
        return StepTimings(env_figures(readings), no_figure(), no_figure(), no_figure(),
                           note="per-batch figures: not measured on the pipe path")

    def async_reset(self) -> None:
        self._calls.check_ready("async_reset")
        self._engine.reset(None, None)

    def send(self, actions: Any, env_ids: npt.ArrayLike) -> None:
        self._calls.check_ready("send")
        self._engine.send(actions, env_ids)

    def recv(self, timeout: Optional[float] = None) -> Step:
        self._calls.check_ready("recv")
        return self._engine.receive(timeout)

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False) -> None:
        """Ends the workers, within a bound (``VectorEnv.close`` calls this once):
        ``docs/protocol.rst`` ("Closing"). ``timeout``: seconds running jobs may take
        before their workers are terminated (default: ``CLOSE_POLITE_TIMEOUT``)."""
        pending = self._calls.close()
        if pending is not AsyncState.DEFAULT:
            # AsyncVectorEnv's UserWarning, word for word.
            gym.logger.warn(f"Calling `close` while waiting for a pending call to "
                            f"`{pending.value}` to complete.")
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._board is not None and not terminate:
            self._board.release(timeout)
        close_all(self._workers, polite_timeout=0.0 if terminate else None)
        if self._block is not None:
            self._block.close()
        self._board = None
        self._restarter = None
        engine: Optional[JobEngine] = getattr(self, "_engine", None)  # None: __init__ failed
        if engine is not None:
            engine.close()


# A second thread's call raises ConcurrentUseError before it writes or posts anything
# (else it would write into the rows of the first thread's step).
guard_methods(FastVectorEnv, ("reset", "reset_async", "reset_wait", "step", "step_async",
                              "step_wait", "call", "call_async", "call_wait", "get_attr",
                              "set_attr", "render", "async_reset", "send", "recv",
                              "call_envs", "timings"))
