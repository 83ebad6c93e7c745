"""One environment in one worker process: :class:`ProcessEnvironment`, the parent's handle
(docs/protocol.rst; docs/contract.rst, "One env in one worker: ``ProcessEnvironment``")."""

import functools
import multiprocessing
import multiprocessing.connection
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import cloudpickle

from alf_env import nest
from alf_env.control_plane.channel import Promise, WorkerChannel
from alf_env.control_plane.guards import NotCopyable, OneThread, guard_methods
from alf_env.control_plane.protocol import START_METHODS, SYNC_PROGRESS_CALL, EnvState, MessageType
from alf_env.control_plane.remote import RemoteMethod
from alf_env.control_plane.shutdown import install_hooks
from alf_env.control_plane.watchdog import parent_death_plan, signals_deferred
from alf_env.control_plane.worker import JobLoopEntry, worker_main
from alf_env.errors import EnvironmentClosedAttributeError, EnvironmentClosedError


def _call_blocking(env: "ProcessEnvironment", name: str, *args: Any, **kwargs: Any) -> Any:
    return env._one_thread.run(f"{name}()", lambda: env.call(name, *args, **kwargs)())


class ProcessEnvironment(NotCopyable):
    """Runs one environment in a worker process: one thread at a time, not copyable,
    ignored by a process forked from this one (docs/contract.rst, "Errors").

    Args:
        env_constructor: returns the env; gets ``env_id=`` if its signature accepts it.
        env_id: passed to the constructor and named in errors.
        flatten: send actions and time steps as flat lists (cheaper to pickle).
        fast: the worker will run the native job loop (:meth:`start_job_loop`).
        num_envs: envs sharing the native region (``fast`` only; ``env_id`` is below it).
        hosted_envs: how many envs the worker hosts (ids from ``env_id``).
        torch_num_threads_per_env: ``torch.set_num_threads`` in the worker (``None``: leave it).
        daemon: ``False`` lets the env start processes; the worker ends with this one anyway.
    """

    def __init__(self, env_constructor: Callable[..., Any],
                 env_id: Optional[int] = None, flatten: bool = False,
                 fast: bool = False, num_envs: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1,
                 start_method: str = "fork", name: str = "", hosted_envs: int = 1,
                 daemon: bool = True) -> None:
        if start_method not in START_METHODS:
            raise ValueError(f"start_method: expected one of {START_METHODS}, got {start_method!r}")
        if not callable(env_constructor):
            raise TypeError(f"env_constructor: expected a callable, got "
                            f"{type(env_constructor).__name__}")
        if fast and env_id is not None and not 0 <= env_id < max(num_envs, 1):
            raise ValueError(f"env_id: expected 0 <= env_id < num_envs={num_envs} "
                             f"with fast=True, got {env_id}")
        self._env_constructor = env_constructor
        self._env_id = env_id
        self._flatten = flatten
        self._torch_num_threads = torch_num_threads_per_env
        self._start_method = start_method
        self._daemon = bool(daemon)
        self._name = name or f"alf_env-worker-{env_id if env_id is not None else 0}"
        self._ctx: Any = multiprocessing.get_context(start_method)  # typed without Process
        self._pid: Optional[int] = None
        self._one_thread = OneThread(f"ProcessEnvironment of env {env_id}")
        self._channel = WorkerChannel(
            env_id, None if env_id is None else list(range(env_id, env_id + hosted_envs)),
            fast, self._one_thread)
        self._spec_cache: Dict[str, Any] = {}

    def start(self, wait_to_start: bool = True) -> None:
        """Starts the worker process and, if ``wait_to_start``, waits for its env; raises
        ``RuntimeError`` if started already, ``EnvironmentClosedError`` if closed."""
        state = self._channel.state
        if state is EnvState.CLOSED:
            raise EnvironmentClosedError(f"env {self._env_id} is closed; create a new one")
        if state is not EnvState.NEW:
            raise RuntimeError(f"env {self._env_id}: start() called twice "
                               f"(state is {state.value})")
        parent_conn, child_conn = self._ctx.Pipe()
        pickled = self._start_method != "fork"
        constructor = (cloudpickle.dumps(self._env_constructor) if pickled
                       else self._env_constructor)
        process = self._ctx.Process(
            target=worker_main, name=self._name, daemon=self._daemon,
            args=(child_conn, constructor, self._env_id, self._flatten, self._torch_num_threads,
                  os.getpid(), pickled, parent_death_plan(self._start_method)))
        install_hooks()
        try:
            with signals_deferred(self._start_method):
                process.start()
        except BaseException:  # nothing started: close() must not join it
            parent_conn.close()
            child_conn.close()
            raise
        self._pid = process.pid
        child_conn.close()
        self._channel.open(process, parent_conn)
        if wait_to_start:
            self.wait_start()

    def wait_start(self, timeout: Optional[float] = None) -> None:
        """Waits until the worker has constructed its env (``timeout``: seconds at most); raises
        what the constructor raised, ``WorkerDiedError`` or ``EnvTimeoutError``."""
        self._channel.wait_start(timeout)

    def close(self, polite_timeout: Optional[float] = None) -> None:
        """Closes the env and ends the worker; idempotent, bounded in time, never raises
        (docs/protocol.rst, "Closing"). Many envs close at once with :func:`close_all`."""
        self._channel.close(polite_timeout)

    def __enter__(self) -> "ProcessEnvironment":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def call(self, name: str, *args: Any, **kwargs: Any) -> Promise:
        """Calls ``env.name(*args, **kwargs)`` in the worker; returns a promise of the value."""
        return self._channel.request(MessageType.CALL, (name, args, kwargs))

    def access(self, name: str) -> Promise:
        """Reads ``env.name`` in the worker; returns a promise."""
        return self._channel.request(MessageType.ACCESS, name)

    def step(self, action: Any, blocking: bool = True) -> Any:
        """Steps the env; returns the time step (``blocking``) or a promise of it. An
        ``AlfEnvironment``'s action is checked against its spec first, never clipped."""
        return self._time_step("step", (nest.flatten(action) if self._flatten else action,),
                               blocking)

    def reset(self, blocking: bool = True) -> Any:
        """Resets the env; returns the first time step, or a promise of it."""
        return self._time_step("reset", (), blocking)

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders the env in the worker and returns the frame."""
        return self.call("render", mode)()

    def seed(self, seed: int) -> Any:
        """Seeds the env in the worker."""
        return self.call("seed", seed)()

    def sync_progress(self, progress: Any = None, blocking: bool = True) -> Any:
        """Calls ``env.sync_progress(progress)`` in the worker if the env defines it (unlike
        ALF's, answered and ordered with the steps); returns whether it does, or a promise."""
        promise = self.call(SYNC_PROGRESS_CALL, progress)
        return promise() if blocking else promise

    def observation_spec(self) -> Any:
        return self._cached("observation_spec")

    def action_spec(self) -> Any:
        return self._cached("action_spec")

    def reward_spec(self) -> Any:
        return self._cached("reward_spec")

    def time_step_spec(self) -> Any:
        return self._cached("time_step_spec")

    def env_info_spec(self) -> Any:
        return self._cached("env_info_spec")

    @property
    def batched(self) -> bool:
        return bool(self._cached("batched", attribute=True))

    @property
    def batch_size(self) -> Optional[int]:
        batch_size: Optional[int] = self._cached("batch_size", attribute=True)
        return batch_size

    @property
    def env_id(self) -> Optional[int]:
        """The id this env was created with."""
        return self._env_id

    @property
    def hosted_env_ids(self) -> Optional[List[int]]:
        """The ids of the envs the worker hosts (``[env_id]`` for one env)."""
        return self._channel.hosted_env_ids

    @property
    def pid(self) -> Optional[int]:
        """The worker's process id (``None`` before start)."""
        return self._pid

    @property
    def sentinel(self) -> Optional[int]:
        """A handle that becomes ready when the worker ends (``None`` when closed)."""
        channel = self._channel
        closed = channel.state in (EnvState.NEW, EnvState.CLOSED)
        return None if closed else channel.process.sentinel

    @property
    def connection(self) -> Optional[multiprocessing.connection.Connection]:
        """The parent's end of the pipe (for front ends that multiplex waits)."""
        return self._channel.conn

    @property
    def channel(self) -> WorkerChannel:
        """The worker's process and pipe."""
        return self._channel

    def start_job_loop(self, spec: JobLoopEntry,
                        doorbell: Callable[[Callable[[], None]], None]) -> None:
        """:meth:`WorkerChannel.start_job_loop`."""
        self._channel.start_job_loop(spec, doorbell)

    @property
    def in_job_loop(self) -> bool:
        """:attr:`WorkerChannel.in_job_loop`."""
        return self._channel.in_job_loop

    def stop_job_loop(self) -> None:
        """:meth:`WorkerChannel.stop_job_loop`."""
        self._channel.stop_job_loop()

    def pending_report(self) -> Promise:
        """:meth:`WorkerChannel.pending_report`."""
        return self._channel.pending_report()

    def mark_died(self, during: str) -> Exception:
        """:meth:`WorkerChannel.mark_died`."""
        return self._channel.mark_died(during)

    def __getattr__(self, name: str) -> Any:
        """Reads attribute ``name`` of the remote env (a method is called remotely; no dunder);
        raises ``EnvironmentClosedAttributeError``, an ``AttributeError``, once closed."""
        if (name.startswith("__") and name.endswith("__")) or "_channel" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if self._channel.state is EnvState.CLOSED:
            raise EnvironmentClosedAttributeError(
                f"env {self._env_id} is closed: its attribute {name!r} cannot be read; "
                f"create a new environment")
        value = self._one_thread.run(f"reading {name!r}", lambda: self.access(name)())
        if isinstance(value, RemoteMethod):
            return functools.partial(_call_blocking, self, value.name)
        return value

    def _cached(self, name: str, attribute: bool = False) -> Any:
        """The env's spec ``name()`` (or ``attribute``), asked once."""
        guard = self._one_thread
        guard.enter("reading an attribute" if attribute else "reading a spec")
        try:
            if name not in self._spec_cache:
                self._spec_cache[name] = (self.access if attribute else self.call)(name)()
            return self._spec_cache[name]
        finally:
            guard.leave()

    def _time_step(self, name: str, args: Tuple[Any, ...], blocking: bool) -> Any:
        promise = self._channel.request(MessageType.CALL, (name, args, {}), transform=(
            self._pack_time_step if self._flatten else None))
        return promise() if blocking else promise

    def _pack_time_step(self, flat: List[Any]) -> Any:
        return nest.pack_sequence_as(self.time_step_spec(), flat)


guard_methods(ProcessEnvironment, ("step", "reset", "render", "seed", "sync_progress"))
