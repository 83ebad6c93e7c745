"""One environment in one worker process: :class:`ProcessEnvironment`, the parent's handle.

It starts the worker (``worker``), sends it requests (``protocol``) and returns
their answers or promises (``channel``, its base class), and closes it within
a bound (``shutdown``). See docs/protocol.rst and docs/contract.rst,
"One env in one worker: ``ProcessEnvironment``".
"""

import functools
import multiprocessing
import multiprocessing.connection
import os
import select
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Union

import cloudpickle
from absl import logging

from alf_env import nest
from alf_env.control_plane.channel import Promise, WorkerChannel
from alf_env.control_plane.guards import NotCopyable, OneThread, guard_methods, one_thread_at_a_time
from alf_env.control_plane.protocol import START_METHODS, SYNC_PROGRESS_CALL, EnvState, MessageType
from alf_env.control_plane.remote import RemoteMethod
from alf_env.control_plane.shutdown import (
    Stopping,
    install_hooks,
    register_worker,
    stop_all,
    unregister_worker,
)
from alf_env.control_plane.watchdog import parent_death_plan, signals_deferred
from alf_env.control_plane.worker import worker_main
from alf_env.errors import (
    EnvironmentClosedAttributeError,
    EnvironmentClosedError,
    EnvironmentProcessError,
    WorkerDiedError,
)

if TYPE_CHECKING:
    from alf_env.control_plane.leaf_codec import StepCodecs


def _call_blocking(env: "ProcessEnvironment", name: str, *args: Any, **kwargs: Any) -> Any:
    return env._one_thread.run(f"{name}()", lambda: env.call(name, *args, **kwargs)())


class ProcessEnvironment(NotCopyable, WorkerChannel):
    """Runs one environment in a worker process (the control plane).

    One thread at a time (a second thread's call raises
    :class:`~alf_env.errors.ConcurrentUseError`); not copyable; ignored by a
    process forked from this one. See docs/contract.rst, "Errors".

    Args:
        env_constructor: returns the env; gets ``env_id=`` if its signature
            accepts it. Sent with cloudpickle under ``spawn``/``forkserver``.
        env_id: passed to the constructor and named in errors.
        flatten: send actions and time steps as flat lists (cheaper to pickle).
        fast: the worker will run the native shared-memory loop
            (:meth:`start_fast_loop`).
        num_envs: envs sharing the native region (``fast`` only; ``env_id`` is
            below it).
        hosted_envs: how many envs the worker hosts (ids from ``env_id``); a
            ``WorkerDiedError`` names them all.
        torch_num_threads_per_env: ``torch.set_num_threads`` in the worker
            (``None``: torch is left alone, not imported).
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``.
        name: the worker process's name.
        daemon: the worker's ``daemon`` flag; ``False`` lets the env start
            processes of its own. Either way the worker ends with this process.
    """

    def __init__(self, env_constructor: Callable[..., Any],
                 env_id: Optional[int] = None, flatten: bool = False,
                 fast: bool = False, num_envs: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1,
                 start_method: str = "fork", name: str = "", hosted_envs: int = 1,
                 daemon: bool = True) -> None:
        if start_method not in START_METHODS:
            raise ValueError(f"start_method: expected one of {START_METHODS}, "
                             f"got {start_method!r}")
        if not callable(env_constructor):
            raise TypeError(f"env_constructor: expected a callable, got "
                            f"{type(env_constructor).__name__}")
        if fast and env_id is not None and not 0 <= env_id < max(num_envs, 1):
            raise ValueError(f"env_id: expected 0 <= env_id < num_envs={num_envs} "
                             f"with fast=True, got {env_id}")
        self._fast = fast
        self._env_constructor = env_constructor
        self._env_id = env_id
        self._hosted_env_ids = (None if env_id is None
                                else list(range(env_id, env_id + hosted_envs)))
        self._flatten = flatten
        self._num_envs = num_envs
        self._torch_num_threads = torch_num_threads_per_env
        self._start_method = start_method
        self._daemon = bool(daemon)
        self._name = name or f"alf_env-worker-{env_id if env_id is not None else 0}"
        self._ctx: Any = multiprocessing.get_context(start_method)  # typed without Process
        self._state = EnvState.NEW
        self._conn = None  # type: ignore[assignment]  # set by start(), not read before
        self._process = None  # type: ignore[assignment]  # set by start(), not read before
        self._pid: Optional[int] = None
        # Ends the process if this env is collected unclosed.
        self._finalizer: Optional["weakref.finalize[..., None]"] = None
        self._death: Optional[WorkerDiedError] = None
        self._out_of_step: Optional[EnvironmentProcessError] = None
        self._unplaced = False
        self._next_seq = 0        # sequence number of the next request
        self._received_seq = 0    # sequence number of the next answer to read
        # Weak references to the promises of answers not yet read, by sequence
        # number (the answer of a dropped promise is discarded on arrival).
        self._waiting: Dict[int, "weakref.ReferenceType[Promise]"] = {}
        self._spec_cache: Dict[str, Any] = {}
        # False: no ALF specs; None: not known yet.
        self._codecs: Union["StepCodecs", Literal[False], None] = None
        # Set while the worker runs the native loop: rung for every pipe
        # request, so the worker reads it as it is written (see start_fast_loop).
        self._doorbell: Optional[Callable[[Callable[[], None]], None]] = None
        self._one_thread = OneThread(f"ProcessEnvironment of env {env_id}")

    # One thread at a time (class doc); a blocking call holds the guard from its
    # request to its answer (guard_methods below the class).
    _request = one_thread_at_a_time(WorkerChannel._request, "a request")
    _await = one_thread_at_a_time(WorkerChannel._await, "waiting for an answer")

    # -- life cycle ----------------------------------------------------------

    def start(self, wait_to_start: bool = True) -> None:
        """Starts the worker process.

        Args:
            wait_to_start: wait until the env is constructed; else call :meth:`wait_start`.
        Raises:
            RuntimeError: the env was already started.
            EnvironmentClosedError: the env was closed.
        """
        if self._state is EnvState.CLOSED:
            raise EnvironmentClosedError(f"env {self._env_id} is closed; create a new one")
        if self._state is not EnvState.NEW:
            raise RuntimeError(f"env {self._env_id}: start() called twice "
                               f"(state is {self._state.value})")
        parent_conn, child_conn = self._ctx.Pipe()
        pickled = self._start_method != "fork"
        constructor = (cloudpickle.dumps(self._env_constructor) if pickled
                       else self._env_constructor)
        process = self._ctx.Process(
            target=worker_main, name=self._name, daemon=self._daemon,
            args=(child_conn, constructor, self._env_id, self._flatten,
                  self._torch_num_threads, os.getpid(), pickled,
                  parent_death_plan(self._start_method)))
        install_hooks()
        try:
            with signals_deferred(self._start_method):
                process.start()
        except BaseException:
            # Nothing started: close() must not try to join it.
            parent_conn.close()
            child_conn.close()
            raise
        self._process = process
        self._pid = process.pid
        child_conn.close()
        self._conn = parent_conn
        self._poller = select.poll()
        self._poller.register(parent_conn.fileno(), select.POLLIN)
        self._poller.register(self._process.sentinel, select.POLLIN)
        self._state = EnvState.STARTING
        # Weakly: dropped unclosed, the env is collected and its process ended.
        self._finalizer = register_worker(self)
        if wait_to_start:
            self.wait_start()

    def wait_start(self, timeout: Optional[float] = None) -> None:
        """Waits until the worker has constructed its env.

        Args:
            timeout: seconds to wait at most (``None``: no limit), e.g. for a
                restarted worker (``RestartPolicy.start_timeout``).

        Raises:
            Exception: what the env constructor raised (the worker is reaped).
            WorkerDiedError: the worker died during construction, or its constructor
                raised ``SystemExit`` or ``KeyboardInterrupt`` (with the traceback).
            EnvTimeoutError: ``timeout`` passed first (the worker is ended).
        """
        if self._state is EnvState.RUNNING:
            return
        if self._state is not EnvState.STARTING:
            raise RuntimeError(f"env {self._env_id}: wait_start() needs a started "
                               f"env (state is {self._state.value})")
        try:
            msg_type, payload = self._recv(timeout, during="start")
        except BaseException:
            self.close()
            raise
        if msg_type is MessageType.READY:
            self._state = EnvState.RUNNING
            return
        if msg_type is MessageType.EXCEPTION and getattr(payload, "fatal", False):
            error: Exception = self._died("start", payload.traceback_text)  # before close()
        elif msg_type is MessageType.EXCEPTION:
            error = payload.to_exception()
        else:
            error = EnvironmentProcessError(
                f"env {self._env_id}: expected READY from the worker, got {msg_type}",
                self._env_id)
        self.close()
        raise error

    def close(self, polite_timeout: Optional[float] = None) -> None:
        """Closes the env and ends the worker; idempotent, bounded in time, never raises.

        Errors while closing (the env's own ``close()``, the worker dying) are only
        logged. To close many envs at once, use :func:`close_all`. See
        docs/protocol.rst, "Closing".
        """
        stop_all([self], polite_timeout)

    def _begin_close(self) -> Optional[Stopping]:
        """First step of :func:`stop_all`: marks the env closed, tells the worker.

        Returns:
            what ``stop_all`` waits for, or ``None`` if there is no worker.
        """
        if self._state is EnvState.CLOSED:
            return None
        in_fast_loop = self._doorbell is not None
        self._doorbell = None
        polite = (self._state is EnvState.RUNNING and not in_fast_loop
                  and self._process.exitcode is None)
        started = self._state is not EnvState.NEW
        self._state = EnvState.CLOSED
        unregister_worker(self, self._finalizer)
        if not started:
            return None
        if polite:
            try:
                self._conn.send((MessageType.CLOSE, None))
            except (OSError, ValueError):
                polite = False
        stopping = Stopping(self, polite)
        if not polite and not stopping.exited:
            # It would not read CLOSE (not started yet, or in a native loop
            # that the caller could not bring it back from).
            self._process.terminate()
        return stopping

    def _end_close(self, stopping: Stopping) -> None:
        """Last step of :func:`stop_all`: releases the process and the pipe."""
        process = stopping.process
        if process.exitcode is None:
            logging.error("env %s: the worker (pid %s) survived SIGKILL", self._env_id,
                          process.pid)
        else:
            process.close()
        self._conn.close()
        self._waiting.clear()

    def _disown(self) -> None:
        """In a forked child: closed without a word to the parent's worker, which
        multiprocessing forgets (its exit hook would terminate it).
        """
        if self._state in (EnvState.NEW, EnvState.CLOSED):
            return
        self._state = EnvState.CLOSED
        self._doorbell = None
        # A private name (no stub has it).
        multiprocessing.process._children.discard(self._process)  # type: ignore[attr-defined]

    def __enter__(self) -> "ProcessEnvironment":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- requests ------------------------------------------------------------

    def call(self, name: str, *args: Any, **kwargs: Any) -> Promise:
        """Calls ``env.name(*args, **kwargs)`` in the worker.

        Returns:
            a promise; call it (optionally with ``timeout=``) for the value. A
            promise dropped uncalled gives up its answer.
        """
        return self._request(MessageType.CALL, (name, args, kwargs))

    def access(self, name: str) -> Promise:
        """Reads ``env.name`` in the worker; returns a promise."""
        return self._request(MessageType.ACCESS, name)

    def step(self, action: Any, blocking: bool = True) -> Any:
        """Steps the env; returns the time step (``blocking``) or a promise of it.

        The worker checks an ``AlfEnvironment``'s action against its spec before
        stepping (``ValueError`` naming the field; the env is not touched). Values
        outside a ``BoundedTensorSpec``'s bounds are passed on, never clipped.
        """
        codecs = self._step_codecs()
        record = codecs.pack_action(action) if codecs is not None else None
        if codecs is not None and record is not None:  # an exact action: both ways packed
            promise = self._request(MessageType.STEP_PACKED, record,
                                    transform=codecs.unpack_time_step)
        elif self._flatten:
            promise = self._request(MessageType.CALL, ("step", (nest.flatten(action),), {}),
                                    transform=self._pack_time_step)
        else:
            promise = self.call("step", action)
        return promise() if blocking else promise

    def reset(self, blocking: bool = True) -> Any:
        """Resets the env; returns the first time step, or a promise of it."""
        codecs = self._step_codecs()
        if codecs is not None:
            promise = self._request(MessageType.RESET_PACKED, b"",
                                    transform=codecs.unpack_time_step)
        else:
            promise = self._request(
                MessageType.CALL, ("reset", (), {}),
                transform=self._pack_time_step if self._flatten else None)
        return promise() if blocking else promise

    def _step_codecs(self) -> Optional["StepCodecs"]:
        """The env's ``StepCodecs`` (``None`` for an env without ALF specs)."""
        if self._codecs is None:
            from alf_env.control_plane.leaf_codec import StepCodecs
            try:
                # A tensor-based env's time steps stay torch tensors (pickled).
                if self._cached_attr("is_tensor_based"):
                    self._codecs = False
                else:
                    rows = (self.batch_size or 0) if self.batched else 0
                    self._codecs = StepCodecs(self.action_spec(), self.time_step_spec(),
                                              rows)
            except AttributeError:
                self._codecs = False
        return self._codecs or None

    def step_packed(self, record: bytes, blocking: bool = True) -> Any:
        """Steps with an action packed by a ``LeafCodec`` of the env's action spec.

        The pipe path of ``ParallelAlfEnvironment``, whose caller has checked the
        action; the answer is the packed time step (:mod:`alf_env.control_plane.leaf_codec`).
        """
        promise = self._request(MessageType.STEP_PACKED, record)
        return promise() if blocking else promise

    def reset_packed(self, blocking: bool = True) -> Any:
        """Resets; the answer is the packed time step (see :meth:`step_packed`)."""
        promise = self._request(MessageType.RESET_PACKED, b"")
        return promise() if blocking else promise

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders the env in the worker and returns the frame."""
        return self.call("render", mode)()

    def seed(self, seed: int) -> Any:
        """Seeds the env in the worker."""
        return self.call("seed", seed)()

    def sync_progress(self, progress: Any = None, blocking: bool = True) -> Any:
        """Forwards the trainer's training progress to the env (ALF's ``sync_progress``).

        Calls ``env.sync_progress(progress)`` in the worker if the env defines it.
        Unlike ALF's, the call is answered and ordered with the steps; see
        docs/migration.rst.

        Returns:
            Whether the env defines ``sync_progress`` (or a promise of it).
        """
        promise = self.call(SYNC_PROGRESS_CALL, progress)
        return promise() if blocking else promise

    def observation_spec(self) -> Any:
        return self._cached_spec("observation_spec")

    def action_spec(self) -> Any:
        return self._cached_spec("action_spec")

    def reward_spec(self) -> Any:
        return self._cached_spec("reward_spec")

    def time_step_spec(self) -> Any:
        return self._cached_spec("time_step_spec")

    def env_info_spec(self) -> Any:
        return self._cached_spec("env_info_spec")

    @property
    def batched(self) -> bool:
        batched: bool = self._cached_attr("batched")
        return batched

    @property
    def batch_size(self) -> Optional[int]:
        batch_size: Optional[int] = self._cached_attr("batch_size")
        return batch_size

    @property
    def env_id(self) -> Optional[int]:
        """The id this env was created with."""
        return self._env_id

    @property
    def hosted_env_ids(self) -> Optional[List[int]]:
        """The ids of the envs the worker hosts (``[env_id]`` for one env)."""
        return self._hosted_env_ids

    @property
    def pid(self) -> Optional[int]:
        """The worker's process id (``None`` before start)."""
        return self._pid

    @property
    def sentinel(self) -> Optional[int]:
        """A handle that becomes ready when the worker ends (``None`` when closed)."""
        if self._state in (EnvState.NEW, EnvState.CLOSED):
            return None
        return self._process.sentinel

    @property
    def connection(self) -> Optional[multiprocessing.connection.Connection]:
        """The parent's end of the pipe (for front ends that multiplex waits)."""
        return self._conn

    def __getattr__(self, name: str) -> Any:
        """Reads attribute ``name`` of the remote env (a method is called remotely).

        Names with one leading underscore are forwarded; dunder names (probed by
        ``pickle`` and ``copy``) are not, nor is anything before ``__init__`` ran.

        Raises:
            EnvironmentClosedAttributeError: the env is closed (an ``AttributeError``
                too, so ``getattr(env, name, None)`` gives ``None``).
        """
        if (name.startswith("__") and name.endswith("__")) or "_state" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if self._state is EnvState.CLOSED:
            raise EnvironmentClosedAttributeError(
                f"env {self._env_id} is closed: its attribute {name!r} cannot be read; "
                f"create a new environment")
        value = self._one_thread.run(f"reading {name!r}", lambda: self.access(name)())
        if isinstance(value, RemoteMethod):
            return functools.partial(_call_blocking, self, value.name)
        return value

    # -- internals -----------------------------------------------------------

    def _cached_spec(self, name: str) -> Any:
        if name not in self._spec_cache:
            self._spec_cache[name] = self.call(name)()
        return self._spec_cache[name]

    def _cached_attr(self, name: str) -> Any:
        if name not in self._spec_cache:
            self._spec_cache[name] = self.access(name)()
        return self._spec_cache[name]

    _cached_spec = one_thread_at_a_time(_cached_spec, "reading a spec")
    _cached_attr = one_thread_at_a_time(_cached_attr, "reading an attribute")

    def _pack_time_step(self, flat: List[Any]) -> Any:
        return nest.pack_sequence_as(self.time_step_spec(), flat)


guard_methods(ProcessEnvironment, ("step", "reset", "step_packed", "reset_packed", "render",
                                   "seed", "sync_progress"))
