"""``FastVectorEnv``: gymnasium's vector API over alf_env's shared-memory workers.

Design
------
:class:`FastVectorEnv` is a ``gymnasium.vector.VectorEnv`` that behaves like
``AsyncVectorEnv`` (and, value for value, like ``SyncVectorEnv``) and adds an
EnvPool-style asynchronous mode.

**Processes.** Worker ``w`` is a ``ProcessEnvironment(fast=True)`` hosting an
:class:`~alf_env.data_plane.gym_rows.EnvGroup` of consecutive envs. By default
there are as many workers as CPUs this process may use (``num_workers``),
the envs spread over them as evenly as possible (EnvPool's ``num_threads``);
``envs_per_worker=1`` gives one process per env. Once every worker is up and the spaces
are checked, each enters the native job loop with a
:class:`~alf_env.data_plane.gym_rows.GymRowsHandler`; the pipe is then reached
through CALL jobs (the doorbell of :class:`~alf_env.data_plane.job_board.JobBoard`).

**Shared memory** (one ``SharedBlock``, one row per env) holds every
fixed-size datum of the hot path:

* the action fields and the observation fields (see
  :mod:`alf_env.data_plane.space_layout`: Box, Discrete, MultiDiscrete, MultiBinary,
  Text, Tuple, Dict and OneOf map to fields);
* ``reward`` (float64, like gymnasium), ``terminated``, ``truncated``;
* ``report``: "this env has an entry in its worker's pipe report";
* ``info`` (``info_bytes`` per env) and ``info_layout``: the fixed-size
  values of the env's info dict (numbers, numeric arrays) and the id of
  their layout, learned from what the envs return (see
  :mod:`alf_env.data_plane.info_codec`): an env whose info keeps its keys and types
  costs no pipe message.

**The pipe** carries what has no fixed size, only when there is some:

* info values of no fixed size (str, None, nested dicts; in SAME_STEP mode
  ``final_obs`` and ``final_info`` at an episode's end), the signature of a
  new info layout (once per layout and worker), and whole infos that do not
  fit the info area; an empty info costs nothing;
* observation leaves of spaces with no fixed size (Graph, Sequence, custom
  spaces): they are pickled every step, so such spaces cost a pipe message
  per worker per step (about what ``AsyncVectorEnv`` pays for everything);
* reset arguments other than the default (seeds, options, ``reset_mask``):
  one pipe call per worker before the RESET job;
* ``call`` / ``get_attr`` / ``set_attr`` / ``render``, and errors with their
  worker tracebacks.

A worker sends at most one report per job; the parent reads it as soon as it
sees the job finish (``ProcessEnvironment.pending_report``), so the pipe
never gets out of step.

**Autoreset** happens in the workers, per env, exactly as ``SyncVectorEnv``
does it: NEXT_STEP (the step after an episode's end is a reset that returns
reward 0 and terminated = truncated = False), SAME_STEP (reset at once;
``final_obs`` / ``final_info`` in the info) or DISABLED (stepping an env that
ended without resetting it first raises ``AssertionError``, as gymnasium
does; ``reset(options={"reset_mask": mask})`` resets some envs).

State machine
-------------
Calls of the gymnasium API are guarded by :class:`AsyncState`::

    DEFAULT --reset_async--> WAITING_RESET --reset_wait--> DEFAULT
    DEFAULT --step_async---> WAITING_STEP  --step_wait---> DEFAULT
    DEFAULT --call_async---> WAITING_CALL  --call_wait---> DEFAULT

Any other ``*_async`` while not DEFAULT raises ``AlreadyPendingCallError``; a
``*_wait`` without its ``*_async`` raises ``NoAsyncCallError``; anything after
``close()`` raises ``ClosedEnvironmentError``. A ``*_wait`` that times out
raises :class:`~alf_env.errors.EnvTimeoutError` and keeps its state, so it
can be called again (nothing is lost; gymnasium instead forgets the call).
A worker exception returns to DEFAULT and is re-raised with its type and
worker traceback; a dead worker raises ``WorkerDiedError``, and so does every
later call but ``close()``.

Asynchronous mode (EnvPool)
---------------------------
Besides the gymnasium state, the env tracks the workers *in flight* (a STEP
or RESET posted, its result not yet returned). ``async_reset()`` resets every
env; ``send(actions, env_ids)`` steps the given envs; ``recv()`` returns the
first ``batch_size`` envs to finish (5-tuple, rows in completion order,
``info["env_id"]``). With ``batch_size < num_envs``, ``reset()`` is
``async_reset() + recv()`` (returning ``(obs, info)``) and ``step(actions)``
is ``send(actions, <ids of the last recv>) + recv()``, and
``observation_space``/``action_space`` are batched over ``batch_size``. The
unit of asynchrony is a worker: ``send`` takes whole workers (all
``envs_per_worker`` envs of each) and ``batch_size`` must be a multiple of
``envs_per_worker``. In asynchronous mode array leaves are always copies
(``copy=False`` only matters in the synchronous mode).
"""

import enum
import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import gymnasium as gym
import numpy as np
from absl import logging
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from alf_env.control_plane.affinity import WorkerCpus, pin_workers, plan_worker_cpus, usable_cpus
from alf_env.data_plane.shared_block import SPIN_ADAPTIVE, JobType, SharedBlock
from alf_env.control_plane import process_environment as pe
from alf_env.control_plane.process_environment import start_environments
from alf_env.data_plane.job_board import JobBoard
from alf_env.data_plane.job_loop import FastLoopSpec
from alf_env.errors import WorkerDiedError
from alf_env.data_plane.info_codec import (DEFAULT_INFO_BYTES, InfoDecoder, InfoLayout, Payload,
                                  signature_of)
from alf_env.data_plane.space_layout import SpaceLayout
from alf_env.data_plane.gym_rows import (RESERVED_CALL_NAMES, RESET_DEFAULT, RESET_STAGED,
                                   EnvGroup, EnvRows, GymRowsHandler, StagedReset,
                                   block_fields)

__all__ = ["FastVectorEnv", "AsyncState", "make"]

#: dtype of ``info["env_id"]`` in the asynchronous mode (EnvPool's).
ENV_ID_DTYPE = np.int32

Seeds = Union[None, int, Sequence[Optional[int]]]


class AsyncState(enum.Enum):
    """Which gymnasium-style call is pending (values as in gymnasium's AsyncState)."""
    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


class FastVectorEnv(gym.vector.VectorEnv):
    """A gymnasium vector env whose envs run in worker processes, stepped through shared memory.

    Args:
        env_fns: one constructor per env (called in the workers; lambdas and
            closures work with every start method).
        batch_size: envs returned per step; ``None`` or ``len(env_fns)``:
            synchronous; fewer: the asynchronous (EnvPool) mode.
        num_workers: worker processes; the envs are spread over them as evenly
            as possible (consecutive envs per worker, stepped one after the
            other there). Default: the number of CPUs this process may use
            (at most one per env) in the synchronous mode, one per env in the
            asynchronous mode. In the asynchronous mode it must divide the
            number of envs.
        envs_per_worker: the other way to say it: envs per worker process
            (must divide ``len(env_fns)`` and, asynchronous mode,
            ``batch_size``); ``1`` is one process per env. Give
            ``num_workers`` or ``envs_per_worker``, not both.
        copy: return copies of the observations (``True``), or views of the
            shared rows that the next step overwrites (``False``, synchronous
            mode only).
        context: start method, ``"fork"``, ``"spawn"`` or ``"forkserver"``.
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` (or its value);
            the asynchronous mode supports NEXT_STEP and SAME_STEP.
        spin_us: how long waiters spin before sleeping (-1 adaptive, 0 never).
        worker_cpus: where the worker processes run: ``None`` (the OS
            decides), ``"spread"`` (worker ``i`` pinned to the ``i % n``-th
            of the ``n`` CPUs this process may use) or a sequence of CPU ids
            (worker ``i`` pinned to ``worker_cpus[i % len(worker_cpus)]``).
            Spreading helps CPU-bound envs when workers outnumber cores.
        info_bytes: bytes of shared memory per env for the fixed-size values
            of its info dict (numbers and numeric arrays); infos (or values)
            that do not fit travel on the pipe. ``0`` sends every info on the
            pipe.
        info_example: an info dict as the envs return it (or a sequence of
            them, e.g. the reset info and the step info): its layout is known
            before the first step (so that step sends nothing on the pipe),
            and ``info_bytes`` grows to fit it if needed. Optional: layouts
            are otherwise learned from the first infos.

    Raises:
        ValueError: bad arguments, or an action space with a sub-space of no
            fixed size.
        RuntimeError: the envs' observation or action spaces differ (naming
            the env and both spaces).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], *,
                 batch_size: Optional[int] = None, num_workers: Optional[int] = None,
                 envs_per_worker: Optional[int] = None,
                 copy: bool = True, context: str = "fork",
                 autoreset_mode: Union[AutoresetMode, str] = AutoresetMode.NEXT_STEP,
                 spin_us: int = SPIN_ADAPTIVE, worker_cpus: WorkerCpus = None,
                 info_bytes: int = DEFAULT_INFO_BYTES,
                 info_example: Union[None, Dict[str, Any], Sequence[Dict[str, Any]]] = None
                 ) -> None:
        env_fns = list(env_fns)
        batch_size = len(env_fns) if batch_size is None else int(batch_size)
        autoreset_mode = AutoresetMode(autoreset_mode)
        _check_arguments(env_fns, batch_size, context, autoreset_mode)
        self._bounds = plan_workers(len(env_fns), batch_size, num_workers, envs_per_worker)
        self._declared_infos, info_bytes = _declared_infos(info_example, info_bytes)
        cpu_plan = plan_worker_cpus(worker_cpus, len(self._bounds))
        self._workers_pinned = cpu_plan is not None
        self.env_fns = env_fns
        self.num_envs = len(env_fns)
        self.batch_size = batch_size
        sizes = {end - begin for begin, end in self._bounds}
        #: envs per worker (``None`` when the workers hold different numbers).
        self.envs_per_worker: Optional[int] = sizes.pop() if len(sizes) == 1 else None
        self.num_workers = len(self._bounds)
        self.info_bytes = info_bytes
        self.copy = copy
        self.autoreset_mode = autoreset_mode
        self._workers: List[pe.ProcessEnvironment] = []
        self._board: Optional[JobBoard] = None
        self._block: Optional[SharedBlock] = None
        self._state = AsyncState.DEFAULT
        self._broken: Optional[BaseException] = None
        self.is_async = self.batch_size < self.num_envs
        self._row_worker = np.concatenate([np.full(end - begin, w, dtype=np.int64)
                                           for w, (begin, end) in enumerate(self._bounds)])
        self._all_rows = slice(0, self.num_envs)
        self._all_row_list = list(range(self.num_envs))
        self._all_ids = np.arange(self.num_envs)
        self._all_workers = list(range(self.num_workers))
        self._in_flight: Set[int] = set()        # workers with an unreceived STEP/RESET
        self._last_ids = np.arange(0, dtype=np.int64)  # env ids of the last recv()
        self._needs_reset = np.zeros(self.num_envs, dtype=np.bool_)
        self._payloads: Dict[int, Payload] = {}  # env id -> pipe part of its last info
        self._pipe_leaves: Dict[int, list] = {}  # env id -> its pipe observation leaves
        self._pending_calls: List[Any] = []
        self._reset_rows: List[int] = []         # envs whose infos reset_wait returns
        try:
            self._start_workers(context)
            pin_workers([w.pid for w in self._workers], cpu_plan)
            self._check_spaces()
            self._attach_workers(spin_us)
        except BaseException:
            self.close(terminate=True)
            raise
        # Not closed by the program: the exit hook of process_environment
        # brings the workers back from the native loop (the board is
        # registered) and closes them with every other worker, all at once.

    # -- construction ------------------------------------------------------------

    def _start_workers(self, context: str) -> None:
        self._workers = [
            pe.ProcessEnvironment(
                functools.partial(EnvGroup, self.env_fns[begin:end]),
                env_id=begin, hosted_envs=end - begin, fast=True, num_envs=self.num_envs,
                torch_num_threads_per_env=None, start_method=context,
                name=f"alf_env-vector-{w}")
            for w, (begin, end) in enumerate(self._bounds)]
        start_environments(self._workers, start_serially=False)

    def _check_spaces(self) -> None:
        promises = [w.call("describe") for w in self._workers]
        spaces = [pair for p in promises for pair in p()]
        obs0, act0 = spaces[0]
        for i, (obs, act) in enumerate(spaces[1:], start=1):
            for what, mine, first in (("observation", obs, obs0), ("action", act, act0)):
                if mine != first:
                    raise RuntimeError(
                        f"env {i} has {what} space {mine}, but env 0 has {first}; all "
                        f"envs of a FastVectorEnv must have the same {what} space")
        self.single_observation_space = obs0
        self.single_action_space = act0
        self.observation_space = batch_space(obs0, self.batch_size)
        self.action_space = batch_space(act0, self.batch_size)
        metadata, self.render_mode = self._workers[0].call("info")()
        self.metadata = dict(metadata, autoreset_mode=self.autoreset_mode)
        self._obs = SpaceLayout(obs0, "obs", "observation")
        self._act = SpaceLayout(act0, "act", "action")
        if self._act.num_pipe_leaves:
            raise ValueError(f"action space {act0}: {list(self._act.pipe_paths)} have no "
                             f"fixed size; FastVectorEnv moves actions through shared "
                             f"memory only")

    def _attach_workers(self, spin_us: int) -> None:
        self._block = SharedBlock(block_fields(self._obs, self._act, self.info_bytes),
                                  num_rows=self.num_envs, num_workers=self.num_workers)
        rows = EnvRows(self._block, self._obs, self._act)
        self._obs_views, self._act_views = rows.obs, rows.act
        self._reward, self._terminated = rows.reward, rows.terminated
        self._truncated, self._report = rows.truncated, rows.report
        info_view = rows.info if rows.info is not None else np.zeros((self.num_envs, 0),
                                                                     np.uint8)
        self._info_decoder = InfoDecoder(info_view, rows.info_layout, self._row_worker,
                                         self.num_workers)
        for w in range(self.num_workers):
            for lid, signature in enumerate(self._declared_infos, start=1):
                self._info_decoder.register(w, lid, signature)
        controller = self._block.controller(spin_us, workers_pinned=self._workers_pinned)
        self._board = JobBoard(controller, self._workers, on_ok=self._collect_reports)
        for w, worker in enumerate(self._workers):
            controller.set_worker_pid(w, worker.pid)
            handler = GymRowsHandler(self._bounds[w], self._obs, self._act,
                                     self.autoreset_mode, self.info_bytes,
                                     self._declared_infos)
            worker.start_fast_loop(FastLoopSpec(self._block, w, spin_us, handler,
                                                self._workers_pinned),
                                   functools.partial(self._board.serve_pipe, w))

    # -- reports (what workers send on the pipe with a job) ------------------------

    def _collect_reports(self, workers: List[int]) -> Dict[int, BaseException]:
        """Reads the pipe reports of finished STEP/RESET jobs (JobBoard's on_ok hook).

        Returns:
            what reading a worker's report raised (e.g. the worker died), by worker.
        """
        errors: Dict[int, BaseException] = {}
        if not self._payloads and not self._report.any():
            return errors  # the hot path: nobody reported anything
        promises = {}
        for worker in workers:
            job = self._board.job_of(worker)
            if job is not JobType.STEP and job is not JobType.RESET:
                continue
            begin, end = self._bounds[worker]
            for row in range(begin, end):
                self._payloads.pop(row, None)
            if self._report[begin:end].any():
                # Every report's place on its pipe is taken before any is read,
                # so an interrupted read leaves no pipe out of step.
                try:
                    promises[worker] = self._workers[worker].pending_report()
                except Exception as exc:  # noqa: BLE001 -- e.g. known to be dead
                    errors[worker] = exc
        for worker, promise in promises.items():
            begin = self._bounds[worker][0]
            try:
                report, new_layouts = promise()
            except Exception as exc:  # noqa: BLE001 -- raised by the board's waits
                errors[worker] = exc
                continue
            for layout_id, signature in new_layouts:
                self._info_decoder.register(worker, layout_id, signature)
            for k, (payload, leaves) in report.items():
                if payload is not None:
                    self._payloads[begin + k] = payload
                if leaves:
                    self._pipe_leaves[begin + k] = leaves
        return errors

    # -- the gymnasium API ----------------------------------------------------------

    def reset(self, *, seed: Seeds = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        """Resets the envs; returns the batched observations and infos.

        Args:
            seed: ``None`` (unseeded), an int (env ``i`` gets ``seed + i``) or
                one seed (or ``None``) per env.
            options: passed to every env's ``reset``; a ``"reset_mask"`` entry
                (bool array of ``num_envs``) resets only those envs
                (synchronous mode).
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(self, seed: Seeds = None,
                    options: Optional[Dict[str, Any]] = None) -> None:
        """Posts the resets (see :meth:`reset`); collect them with :meth:`reset_wait`."""
        self._assert_is_running()
        seeds = self._seed_list(seed)
        self._assert_state("reset_async")
        options = None if options is None else dict(options)  # the caller's stays intact
        mask = None
        if options is not None and "reset_mask" in options:
            mask = self._check_reset_mask(options.pop("reset_mask"))
        self._drain_in_flight()
        bounds = self._bounds
        if mask is None:
            workers, self._reset_rows = self._all_workers, self._all_row_list
            self._needs_reset[:] = False
        else:
            workers = [w for w in self._all_workers if mask[slice(*bounds[w])].any()]
            self._reset_rows = [int(i) for i in np.flatnonzero(mask)]
            self._needs_reset[mask] = False
        arg = RESET_DEFAULT
        if seed is not None or options is not None or mask is not None:
            arg = RESET_STAGED
            for w in workers:
                rows = slice(*bounds[w])
                local_mask = [True] * (rows.stop - rows.start) if mask is None else mask[rows]
                staged = StagedReset(seeds[rows], options, local_mask)
                self._resolve([self._workers[w].call("stage_reset", staged)], None)
        self._post(workers, JobType.RESET, arg)
        self._state = AsyncState.WAITING_RESET

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        """Waits for the resets posted by :meth:`reset_async`.

        Raises:
            NoAsyncCallError: no reset is pending.
            EnvTimeoutError: ``timeout`` passed (call again to keep waiting).
        """
        self._assert_waiting(AsyncState.WAITING_RESET, "reset_wait", "reset_async")
        if self.is_async:
            obs, _, _, _, infos = self._receive(timeout)
            return obs, infos
        self._wait_all("reset", timeout)
        obs, infos = self._gather_all(self._reset_rows)
        return obs, infos

    def step(self, actions: Any) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Steps the envs (asynchronous mode: those of the last ``recv``)."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Writes the actions and posts the steps; collect them with :meth:`step_wait`.

        Actions are checked against ``single_action_space`` for structure,
        shape and dtype (numpy's "safe" casting rule; non-contiguous arrays
        are fine), not for bounds: a value outside a ``Box``'s bounds or a
        ``Discrete``'s range reaches the env unchanged (never clipped), as
        with gymnasium's own vector envs.

        Raises:
            ValueError: a malformed action (naming the field, the expected and
                the actual shape and dtype); nothing was sent.
        """
        self._assert_is_running()
        self._assert_state("step_async")
        if self.is_async:
            ids = self._last_ids
            if not len(ids):
                raise NoAsyncCallError("step() in the asynchronous mode steps the envs "
                                       "of the last recv(); call reset() first", "step")
        else:
            if self._in_flight:
                raise AlreadyPendingCallError(
                    f"step_async: workers {sorted(self._in_flight)} still run jobs of "
                    f"send()/async_reset(); recv() them first", "step")
            ids = None
        self._send(actions, ids)
        self._state = AsyncState.WAITING_STEP

    def step_wait(self, timeout: Optional[float] = None
                  ) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Waits for the steps posted by :meth:`step_async`.

        Raises:
            NoAsyncCallError: no step is pending.
            EnvTimeoutError: ``timeout`` passed (call again to keep waiting).
        """
        self._assert_waiting(AsyncState.WAITING_STEP, "step_wait", "step_async")
        if self.is_async:
            return self._receive(timeout)
        self._wait_all("step", timeout)
        obs, infos = self._gather_all(self._all_row_list)
        rows = self._all_rows
        terminated, truncated = np.array(self._terminated[rows]), np.array(self._truncated[rows])
        np.logical_or(terminated, truncated, out=self._needs_reset)
        return obs, np.array(self._reward[rows]), terminated, truncated, infos

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """Calls method ``name`` (or reads the attribute) of every env; a tuple."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Sends :meth:`call` to the workers; collect with :meth:`call_wait`."""
        self._assert_is_running()
        if name in RESERVED_CALL_NAMES:
            raise ValueError(f"call({name!r}): use FastVectorEnv.{name}() instead")
        self._assert_state("call_async")
        self._settle()
        # Each worker reads its request and runs it; they run side by side.
        self._pending_calls = self._guard(lambda: [
            w.call("call_each", name, args, kwargs) for w in self._workers])
        self._state = AsyncState.WAITING_CALL

    def call_wait(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        """The results of the pending :meth:`call_async`, one per env.

        Raises:
            NoAsyncCallError: no call is pending.
            EnvTimeoutError: ``timeout`` passed (call again to keep waiting).
        """
        self._assert_waiting(AsyncState.WAITING_CALL, "call_wait", "call_async")
        try:
            groups = self._resolve(self._pending_calls, timeout, "call")
        except pe.EnvTimeoutError:
            raise  # nothing was used up: the call stays pending
        except BaseException:
            self._pending_calls = []
            self._state = AsyncState.DEFAULT
            raise
        self._pending_calls = []
        self._state = AsyncState.DEFAULT
        return tuple(value for group in groups for value in group)

    def get_attr(self, name: str) -> Tuple[Any, ...]:
        """Attribute ``name`` of every env (a method is called without arguments)."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Sets attribute ``name`` of every env.

        Args:
            values: a list or tuple of one value per env, or one value for all.
        """
        self._assert_is_running()
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr({name!r}): expected {self.num_envs} values (one "
                             f"per env), got {len(values)}")
        self._assert_state("set_attr")
        self._settle()
        self._resolve([w.call("set_each", name, list(values[begin:end]))
                       for w, (begin, end) in zip(self._workers, self._bounds)], None)

    def render(self) -> Tuple[Any, ...]:
        """The frames of every env (``env.render()``), as a tuple."""
        return self.call("render")

    @property
    def np_random_seed(self) -> Tuple[Any, ...]:
        """The ``np_random_seed`` of every env (as gymnasium's vector envs give it)."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> Tuple[np.random.Generator, ...]:
        """The numpy generator of every env (copies: they live in the workers)."""
        return self.get_attr("np_random")

    def worker_pids(self) -> List[int]:
        """The pids of the worker processes (for monitoring and CPU pinning)."""
        return [w.pid for w in self._workers]

    # -- the EnvPool API ----------------------------------------------------------

    def async_reset(self) -> None:
        """Resets every env; their first observations come out of :meth:`recv`."""
        self._assert_is_running()
        self._assert_state("async_reset")
        self._drain_in_flight()
        self._needs_reset[:] = False
        self._post(self._all_workers, JobType.RESET, RESET_DEFAULT)

    def send(self, actions: Any, env_ids: Any) -> None:
        """Steps the envs ``env_ids`` with ``actions`` (batched in the order of the ids).

        Raises:
            ValueError: bad ids (out of range, repeated, not whole workers, or
                still in flight) or a malformed action; nothing was sent.
        """
        self._assert_is_running()
        self._assert_state("send")
        self._send(actions, env_ids)

    def recv(self, timeout: Optional[float] = None
             ) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The first ``batch_size`` envs to finish: ``(obs, rewards, terminated,
        truncated, info)`` with ``info["env_id"]``, rows in completion order.

        Raises:
            NoAsyncCallError: fewer than ``batch_size`` envs are in flight.
            EnvTimeoutError: ``timeout`` passed (nothing is lost).
        """
        self._assert_is_running()
        self._assert_state("recv")
        return self._receive(timeout)

    # -- closing ------------------------------------------------------------------

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False) -> None:
        """Ends the workers (``VectorEnv.close`` calls this once).

        Bounded: workers still stuck in a job after ``timeout`` are
        terminated, then every worker closes its envs within
        ``CLOSE_POLITE_TIMEOUT`` (else it is terminated, then killed). An
        exception raised by an env's ``close()`` is logged, not raised.

        Args:
            timeout: seconds to let running jobs finish before workers are
                terminated (default: ``CLOSE_POLITE_TIMEOUT``).
            terminate: terminate the workers at once.
        """
        if self._state is not AsyncState.DEFAULT and not terminate:
            logging.warning("FastVectorEnv.close() while a %s call is pending; waiting "
                            "for it", self._state.value)
        self._state = AsyncState.DEFAULT
        if self._board is not None and not terminate:
            self._board.release(timeout)
        pe.close_all(self._workers, polite_timeout=0.0 if terminate else None)
        if self._block is not None:
            self._block.close()
        self._board = None
        self._in_flight.clear()
        self._payloads.clear()
        self._pipe_leaves.clear()

    def __enter__(self) -> "FastVectorEnv":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and hasattr(self, "_workers"):
            self.close(terminate=True)

    # -- internals ------------------------------------------------------------------

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(
                f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
        if self._broken is not None:
            raise self._broken

    def _assert_state(self, what: str) -> None:
        if self._state is not AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{what}` while waiting for a pending call to "
                f"`{self._state.value}` to complete.", self._state.value)

    def _assert_waiting(self, state: AsyncState, what: str, pair: str) -> None:
        """Checks that a ``*_wait`` call may run: the env is open and ``pair`` was called."""
        self._assert_is_running()
        if self._state is not state:
            raise NoAsyncCallError(f"Calling `{what}` without any prior call to `{pair}`.",
                                   state.value)

    def _seed_list(self, seed: Seeds) -> List[Optional[int]]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"seed: expected an int or a list of num_envs={self.num_envs} "
                             f"seeds, got a list of {len(seeds)}")
        return seeds

    def _check_reset_mask(self, mask: Any) -> np.ndarray:
        if self.is_async:
            raise ValueError("options['reset_mask']: the asynchronous mode resets every "
                             "env; reset_mask needs batch_size == num_envs")
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"options['reset_mask']: expected a numpy array, got "
                            f"{type(mask).__name__}")
        if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
            raise ValueError(f"options['reset_mask']: expected shape ({self.num_envs},) "
                             f"and dtype bool, got shape {mask.shape} and dtype {mask.dtype}")
        if not mask.any():
            raise ValueError("options['reset_mask']: expected at least one True value")
        return mask

    def _guard(self, fn: Callable[[], Any]) -> Any:
        """Runs a post or a wait: a dead worker breaks the env; any other error
        but a timeout (after which waiting again picks the call up) ends the call."""
        try:
            return fn()
        except WorkerDiedError as exc:
            self._broken = exc
            self._state = AsyncState.DEFAULT
            raise
        except pe.EnvTimeoutError:
            raise
        except BaseException:
            self._state = AsyncState.DEFAULT
            raise

    def _post(self, workers: Sequence[int], job: Any, arg: int) -> None:
        self._guard(lambda: self._board.post(workers, job, arg))
        self._in_flight.update(workers)

    def _settle(self) -> None:
        """Lets the jobs in flight finish (their results stay for recv()).

        Needed before a pipe request: the doorbell must find the worker idle,
        or it would wait for the job itself and could raise the job's error
        with the request already on the pipe.
        """
        if self._in_flight:
            workers = sorted(self._in_flight)
            self._guard(lambda: self._board.wait_for(workers, "finishing jobs in flight",
                                                     raise_errors=False))

    def _send(self, actions: Any, env_ids: Optional[Any]) -> None:
        """Checks ids and actions, writes the actions, posts STEP to their workers.

        ``env_ids=None`` means every env (the synchronous step).
        """
        if env_ids is None:
            ids, rows, workers = self._all_ids, self._all_rows, self._all_workers
        else:
            ids = rows = self._check_ids(env_ids)
            workers = sorted(set(self._row_worker[ids].tolist()))
        arrays = self._act.encode_batch(actions, len(ids))
        if self.autoreset_mode is AutoresetMode.DISABLED and self._needs_reset[ids].any():
            ended = ids[self._needs_reset[ids]].tolist()
            raise AssertionError(
                f"envs {ended} ended (terminated or truncated) and autoreset_mode is "
                f"DISABLED: reset them first, e.g. reset(options={{'reset_mask': mask}})")
        self._act.write_rows(self._act_views, rows, arrays)
        self._post(workers, JobType.STEP, 0)

    def _check_ids(self, env_ids: Any) -> np.ndarray:
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"env_ids: expected a 1-d sequence of ints, got "
                             f"{np.asarray(env_ids).dtype} of shape {ids.shape}")
        ids = ids.astype(np.int64)
        if ids.size == 0:
            raise ValueError("env_ids: expected at least one env id")
        bad = ids[(ids < 0) | (ids >= self.num_envs)]
        if bad.size:
            raise ValueError(f"env_ids: expected ids in [0, {self.num_envs}), got "
                             f"{bad.tolist()}")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_ids: each env may be listed once, got {ids.tolist()}")
        e = self.envs_per_worker
        workers = set(self._row_worker[ids].tolist())
        if len(workers) * e != ids.size:
            raise ValueError(f"env_ids: with envs_per_worker={e} a worker is stepped "
                             f"whole; list all envs of each worker, got {ids.tolist()}")
        busy = sorted(self._bounds[w][0] for w in workers if w in self._in_flight)
        if busy:
            raise ValueError(f"env_ids: envs {busy} are still in flight (sent, not yet "
                             f"received); recv() them first")
        return ids

    def _wait_all(self, during: str, timeout: Optional[float]) -> None:
        """Waits for every in-flight worker (synchronous mode)."""
        workers = sorted(self._in_flight)
        try:
            self._guard(lambda: self._board.wait_for(workers, during, timeout))
        except pe.EnvTimeoutError:
            raise
        except BaseException:
            self._in_flight.clear()  # every job finished (or the env is broken)
            raise
        self._in_flight.clear()
        self._state = AsyncState.DEFAULT

    def _drain_in_flight(self) -> None:
        """Finishes jobs still in flight, dropping their results (before a reset)."""
        if not self._in_flight:
            return
        workers = sorted(self._in_flight)
        self._in_flight.clear()
        try:
            self._guard(lambda: self._board.wait_for(workers, "finishing earlier jobs"))
        except WorkerDiedError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the reset is the recovery
            logging.warning("FastVectorEnv: a job in flight before the reset raised %r; "
                            "dropped", exc)

    def _receive(self, timeout: Optional[float]
                 ) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The first ``batch_size`` envs in flight to finish (the EnvPool recv)."""
        e = self.envs_per_worker  # the asynchronous mode has workers of equal size
        k = self.batch_size // e
        if len(self._in_flight) < k:
            self._state = AsyncState.DEFAULT
            raise NoAsyncCallError(
                f"recv() returns {self.batch_size} envs, but only "
                f"{len(self._in_flight) * e} are in flight; send() or async_reset() first",
                "recv")
        workers = self._guard(lambda: self._board.wait_first(self._in_flight, k, "recv",
                                                             timeout))
        self._state = AsyncState.DEFAULT
        errors = self._board.pop_errors(workers)
        if errors:
            self._in_flight.difference_update(errors)
            error = next(iter(errors.values()))
            if isinstance(error, WorkerDiedError):
                self._broken = error
            raise error
        self._in_flight.difference_update(workers)
        ids = np.asarray([i for w in workers for i in range(*self._bounds[w])], dtype=np.int64)
        row_list = ids.tolist()
        obs = self._obs.read_rows(self._obs_views, ids, row_list, self._pipe_rows(row_list))
        infos = self._info_decoder.batch(ids, row_list, self._payloads_of(row_list))
        infos["env_id"] = ids.astype(ENV_ID_DTYPE)
        terminated, truncated = self._terminated[ids], self._truncated[ids]
        self._needs_reset[ids] = terminated | truncated
        self._last_ids = ids
        return obs, self._reward[ids], terminated, truncated, infos

    def _gather_all(self, info_rows: List[int]) -> Tuple[Any, Dict[str, Any]]:
        """Observations of every env (synchronous mode) and the infos of ``info_rows``."""
        rows = self._all_row_list
        obs = self._obs.read_rows(self._obs_views, self._all_rows, rows,
                                  self._pipe_rows(rows), self.copy)
        if len(info_rows) == self.num_envs:
            infos = self._info_decoder.batch(self._all_rows, rows, self._payloads_of(rows))
        else:  # some envs were reset (reset_mask): their infos at their own positions
            infos = self._info_decoder.batch(self._all_rows, rows, self._payloads_of(rows),
                                             include=info_rows)
        return obs, infos

    def _payloads_of(self, row_list: List[int]) -> Dict[int, Payload]:
        """The pipe payloads of the infos of ``row_list`` (most steps: none)."""
        if not self._payloads:
            return {}
        return {row: self._payloads[row] for row in row_list if row in self._payloads}

    def _pipe_rows(self, row_list: List[int]) -> Optional[List[list]]:
        if not self._obs.num_pipe_leaves:
            return None
        return [self._pipe_leaves[row] for row in row_list]

    def _resolve(self, promises: List[Any], timeout: Optional[float],
                 during: str = "a call") -> List[Any]:
        """Waits for every promise together (``resolve_all``); a dead worker breaks the env."""
        try:
            return pe.resolve_all(promises, timeout, during)
        except WorkerDiedError as exc:
            self._broken = exc
            raise


def _check_arguments(env_fns: List[Any], batch_size: int, context: str,
                     autoreset_mode: AutoresetMode) -> None:
    """Raises ValueError/TypeError for arguments FastVectorEnv cannot work with."""
    n, b = len(env_fns), batch_size
    if n == 0:
        raise ValueError("env_fns: expected at least one env constructor, got none")
    for i, fn in enumerate(env_fns):
        if not callable(fn):
            raise TypeError(f"env_fns[{i}]: expected a callable returning a "
                            f"gymnasium.Env, got {type(fn).__name__}")
    if context not in pe.START_METHODS:
        raise ValueError(f"context: expected one of {pe.START_METHODS}, got {context!r}")
    if not 1 <= b <= n:
        raise ValueError(f"batch_size: expected 1 <= batch_size <= {n} (the number "
                         f"of envs), got {b}")
    if b < n and autoreset_mode is AutoresetMode.DISABLED:
        raise ValueError("autoreset_mode: the asynchronous mode (batch_size < num_envs) "
                         "resets envs on its own; use NEXT_STEP or SAME_STEP, not DISABLED")


def plan_workers(num_envs: int, batch_size: int, num_workers: Optional[int],
                 envs_per_worker: Optional[int]) -> List[Tuple[int, int]]:
    """The env rows ``(begin, end)`` of each worker.

    Args:
        num_envs: number of envs.
        batch_size: envs per step (fewer than ``num_envs``: asynchronous mode).
        num_workers: worker processes, or ``None``.
        envs_per_worker: envs per worker, or ``None``.

    Returns:
        consecutive, non-empty row ranges covering ``[0, num_envs)``, sizes
        differing by at most one (the larger first).

    Raises:
        ValueError: both given, or values that do not fit (naming the argument).
    """
    n, b, is_async = num_envs, batch_size, batch_size < num_envs
    if num_workers is not None and envs_per_worker is not None:
        if int(num_workers) * int(envs_per_worker) != n:
            raise ValueError(f"num_workers={num_workers} and envs_per_worker="
                             f"{envs_per_worker} do not make {n} envs; give one of them")
    if envs_per_worker is not None:
        e = int(envs_per_worker)
        if e < 1 or n % e:
            raise ValueError(f"envs_per_worker: expected a divisor of the number of envs "
                             f"({n}), got {envs_per_worker}")
        num_workers = n // e
    elif num_workers is not None:
        if not 1 <= int(num_workers) <= n:
            raise ValueError(f"num_workers: expected 1 <= num_workers <= {n} (the number "
                             f"of envs), got {num_workers}")
        num_workers = int(num_workers)
        if is_async and n % num_workers:
            raise ValueError(f"num_workers: the asynchronous mode needs workers of equal "
                             f"size, so num_workers must divide the number of envs ({n}); "
                             f"got {num_workers}")
    else:
        num_workers = n if is_async else min(n, len(usable_cpus()))
    base, extra = divmod(n, num_workers)
    bounds, begin = [], 0
    for w in range(num_workers):
        end = begin + base + (w < extra)
        bounds.append((begin, end))
        begin = end
    e = bounds[0][1] - bounds[0][0]
    if is_async and b % e:
        raise ValueError(f"batch_size: the unit of asynchrony is a worker of {e} envs, "
                         f"so batch_size must be a multiple of envs_per_worker={e}; "
                         f"got {b}")
    return bounds


def _declared_infos(info_example: Union[None, Dict[str, Any], Sequence[Dict[str, Any]]],
                    info_bytes: int) -> Tuple[List[Any], int]:
    """The signatures of the declared example infos, and the info area's size to fit them."""
    info_bytes = int(info_bytes)
    if info_bytes < 0:
        raise ValueError(f"info_bytes: expected a size in bytes >= 0, got {info_bytes}")
    if info_example is None:
        return [], info_bytes
    examples = [info_example] if isinstance(info_example, dict) else list(info_example)
    signatures: List[Any] = []
    for i, example in enumerate(examples):
        if not isinstance(example, dict):
            raise TypeError(f"info_example[{i}]: expected an info dict, got "
                            f"{type(example).__name__}")
        signature = signature_of(example)
        layout = InfoLayout(signature, 1 << 30)
        if layout.fits and signature not in signatures:
            signatures.append(signature)
            info_bytes = max(info_bytes, layout.nbytes)
    return signatures, info_bytes


def make(env_id: Union[str, gym.envs.registration.EnvSpec], num_envs: int = 1, *,
         vector_kwargs: Optional[Dict[str, Any]] = None,
         wrappers: Optional[Sequence[Callable[[gym.Env], gym.Wrapper]]] = None,
         **kwargs: Any) -> FastVectorEnv:
    """Builds a :class:`FastVectorEnv` of ``num_envs`` copies of a registered env.

    Like ``gymnasium.make_vec``: ``kwargs`` go to ``gymnasium.make``,
    ``wrappers`` wrap each env, ``vector_kwargs`` go to :class:`FastVectorEnv`.
    """
    env_fn = functools.partial(_make_one, env_id, tuple(wrappers or ()), kwargs)
    env = FastVectorEnv([env_fn] * num_envs, **(vector_kwargs or {}))
    try:
        env.spec = gym.spec(env_id) if isinstance(env_id, str) else env_id
    except gym.error.Error:  # e.g. "module:Env-v0" registered in the workers only
        env.spec = None
    return env


def _make_one(env_id: Any, wrappers: Tuple[Callable[[gym.Env], gym.Wrapper], ...],
              kwargs: Dict[str, Any]) -> gym.Env:
    env = gym.make(env_id, **kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env
