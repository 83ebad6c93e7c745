"""The worker process: construct the env, then answer the parent's requests (docs/protocol.rst).
``JOB_LOOP``'s payload runs its own loop (:class:`JobLoopEntry`): no shared memory here."""

import gc
import inspect
import multiprocessing.util
import os
import sys
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Protocol, Sequence, Tuple

import cloudpickle
from absl import logging

from alf_env import nest
from alf_env.control_plane.affinity import batch_scheduling
from alf_env.control_plane.protocol import SYNC_PROGRESS_CALL, MessageType, read_message
from alf_env.control_plane.remote import RemoteException, RemoteMethod
from alf_env.control_plane.step_timings import STEP_TIMINGS_CALL, StepClock
from alf_env.control_plane.watchdog import die_with_parent, start_parent_watchdog, worker_signals

if TYPE_CHECKING:
    from alf_env.control_plane.spec_checks import WorkerSpecGuard


class JobLoopEntry(Protocol):
    """The payload of ``JOB_LOOP``: the loop the worker enters (a ``JobLoopSpec``)."""

    def run(self, conn: Connection, proxy: "WorkerEnvProxy", env_id: Optional[int]) -> bool:
        """Serves the loop; returns whether to keep serving the pipe afterwards."""


def construct_env(env_constructor: Callable[..., Any], env_id: Optional[int]) -> Any:
    """Calls ``env_constructor``, passing ``env_id`` when it accepts one."""
    try:
        params: Mapping[str, inspect.Parameter] = inspect.signature(env_constructor).parameters
    except (TypeError, ValueError):
        params = {}
    accepts = "env_id" in params or any(
        p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    return env_constructor(env_id=env_id) if accepts else env_constructor()


def forward_progress(env: Any, progress: Any) -> bool:
    """Calls ``env.sync_progress(progress)`` if ``env`` defines it; returns whether it did."""
    sync = getattr(env, "sync_progress", None)
    if not callable(sync):
        return False
    sync(progress)
    return True


class WorkerEnvProxy:
    """What the worker calls: the env, packed and unpacked in flatten mode, and for an
    ``AlfEnvironment`` checked against its specs around ``step`` and ``reset``."""

    def __init__(self, env: Any, flatten: bool, env_id: Optional[int] = None) -> None:
        self.env = env
        self.flatten = flatten
        self.env_id = env_id
        self._guard: Optional["WorkerSpecGuard"] = None
        self._guard_built = False
        # A group that times its own envs' steps brings its clock; one env is timed here.
        own_clock = getattr(env, "step_clock", None)
        self._times_steps = not isinstance(own_clock, StepClock)
        self.step_clock = own_clock if isinstance(own_clock, StepClock) else StepClock()

    def access(self, name: str) -> Any:
        """Reads an attribute; a method is answered by a marker to call it remotely."""
        value = getattr(self.env, name)
        if inspect.ismethod(value) or inspect.isbuiltin(value):
            return RemoteMethod(name)
        return value

    def call(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if name == SYNC_PROGRESS_CALL:
            return forward_progress(self.env, *args, **kwargs)
        if name == STEP_TIMINGS_CALL:
            return self.step_clock.take()
        guard = self.guard() if name in ("step", "reset") else None
        if name == "step" and len(args) == 1 and not kwargs:
            (action,) = args
            if guard is not None:
                guard.action.check(action, flattened=self.flatten)
            if self.flatten:
                args = (nest.pack_sequence_as(self.env.action_spec(), action),)
        if name == "step" and self._times_steps:
            start = StepClock.now()
            result = self.env.step(*args, **kwargs)
            self.step_clock.record(0, StepClock.now() - start)
        else:
            result = getattr(self.env, name)(*args, **kwargs)
        if guard is not None:  # a step or reset
            checked = guard.time_step
            return checked.flat(result) if self.flatten else checked(result)
        if self.flatten and (name == "step" or name == "reset"):
            return nest.flatten(result)
        return result

    def guard(self) -> Optional["WorkerSpecGuard"]:
        """The env's spec guard (built at the first step/reset), or ``None``."""
        if not self._guard_built:
            from alf_env.control_plane.spec_checks import WorkerSpecGuard
            self._guard = WorkerSpecGuard.for_env(self.env, self.env_id)
            self._guard_built = True
        return self._guard


def worker_main(conn: Connection, env_constructor: Any, env_id: Optional[int], flatten: bool,
                torch_num_threads: Optional[int], parent_pid: int, pickled: bool,
                death_parent: Optional[int] = None) -> None:
    """Entry point of a worker process: construct the env, then serve calls. A
    ``SystemExit`` or ``KeyboardInterrupt`` ends it (:func:`_exit_with_last_words`)."""
    die_with_parent(death_parent)
    # Inherited garbage is the parent's to finalize (docs/protocol.rst, "Closing").
    gc.freeze()
    worker_signals()
    start_parent_watchdog(parent_pid)
    batch_scheduling()
    if torch_num_threads is not None:
        import torch
        torch.set_num_threads(torch_num_threads)
    try:
        if pickled:
            env_constructor = cloudpickle.loads(env_constructor)
        env = construct_env(env_constructor, env_id)
    except Exception as exc:  # noqa: BLE001 -- reported to the parent
        conn.send((MessageType.EXCEPTION, RemoteException(exc, env_id, "construction")))
        conn.close()
        return
    except BaseException as exc:  # noqa: BLE001 -- sys.exit(), Ctrl-C: the worker ends
        _exit_with_last_words(conn, exc, env_id, "construction")
    conn.send((MessageType.READY, None))
    proxy = WorkerEnvProxy(env, flatten, env_id)
    try:
        serve(conn, proxy, env_id)
    except BaseException as exc:  # noqa: BLE001 -- whatever ends the worker is reported
        _exit_with_last_words(conn, exc, env_id, "serving the trainer")
    conn.close()
    _exit_worker()


def _exit_with_last_words(conn: Connection, exc: BaseException,
                          env_id: Optional[int], during: str) -> None:
    """Sends ``exc`` home as a fatal ``EXCEPTION`` (the trainer raises ``WorkerDiedError``, not
    ``exc``, which could end it), then exits with a ``SystemExit``'s code, else 1."""
    try:
        conn.send((MessageType.EXCEPTION, RemoteException(exc, env_id, during, fatal=True)))
        conn.close()
    except (OSError, ValueError):
        pass  # the trainer is gone, or the pipe closed: nobody to tell
    status = 1
    if isinstance(exc, SystemExit):
        code = exc.code
        status = 0 if code is None else code if isinstance(code, int) else 1
    _exit_worker(status)


def _exit_worker(status: int = 0) -> None:
    """Ends a worker without the interpreter's teardown (docs/reliability.md, "How a
    training script ends"), as multiprocessing ends a ``fork`` worker."""
    multiprocessing.util._exit_function()  # type: ignore[attr-defined]  # private: no stub
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(status)


def serve(conn: Connection, proxy: WorkerEnvProxy, env_id: Optional[int]) -> None:
    """Answers requests on ``conn`` until ``CLOSE`` or until the pipe closes."""
    while True:
        try:
            msg_type, payload = read_message(conn)
        except (EOFError, OSError):  # the parent closed its end (or died)
            try:
                proxy.env.close()
            except Exception:  # noqa: BLE001 -- the parent is gone; nobody to tell
                logging.exception("env %s: close() raised while shutting down", env_id)
            return
        if not handle_message(conn, proxy, env_id, msg_type, payload):
            return


def handle_message(conn: Connection, proxy: WorkerEnvProxy, env_id: Optional[int],
                   msg_type: Optional[MessageType], payload: Any) -> bool:
    """Handles one request as ``read_message`` gave it; returns False to exit the worker."""
    if msg_type is None:
        conn.send((MessageType.EXCEPTION,
                   RemoteException(payload, env_id, "unpickling a request in the worker")))
        return True
    if msg_type is MessageType.ACCESS:
        _answer(conn, env_id, f"access to {payload!r}", lambda: proxy.access(payload))
        return True
    if msg_type is MessageType.CALL:
        name, args, kwargs = payload
        _answer(conn, env_id, name, lambda: proxy.call(name, args, kwargs))
        return True
    if msg_type is MessageType.CLOSE:
        _answer(conn, env_id, "close", proxy.env.close)
        return False
    if msg_type is MessageType.JOB_LOOP:
        entry: JobLoopEntry = payload
        return entry.run(conn, proxy, env_id)
    if msg_type in (MessageType.READY, MessageType.RESULT, MessageType.EXCEPTION):
        raise ValueError(f"env {env_id} worker: {msg_type} is sent by workers, not to them")
    raise ValueError(f"env {env_id} worker: unknown message type {msg_type!r}")


def _answer(conn: Connection, env_id: Optional[int], during: str, fn: Callable[[], Any]) -> None:
    """Runs ``fn`` and sends its value as RESULT, or what it raised as EXCEPTION."""
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 -- reported to the parent
        conn.send((MessageType.EXCEPTION, RemoteException(exc, env_id, during)))
        return
    try:
        conn.send((MessageType.RESULT, value))
    except Exception as exc:  # noqa: BLE001 -- e.g. an unpicklable result
        conn.send((MessageType.EXCEPTION,
                   RemoteException(exc, env_id, f"sending the result of {during}")))


def close_each(envs: Sequence[Any]) -> None:
    """Closes every env of ``envs``, even if one raises; then raises the first error."""
    first_error = None
    for env in envs:
        try:
            env.close()
        except Exception as exc:  # noqa: BLE001 -- re-raised after the others
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
