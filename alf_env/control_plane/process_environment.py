"""One environment in one worker process, driven over an enum-typed pipe protocol.

Design
------
The parent (:class:`ProcessEnvironment`) and the worker (:func:`_worker_main`)
exchange ``(MessageType, payload)`` tuples over a ``multiprocessing`` pipe:

=============  ===========  ====================================================
message        sender       payload / meaning
=============  ===========  ====================================================
``READY``      worker       ``None``: the env was constructed; calls may follow.
``ACCESS``     parent       attribute name: read ``getattr(env, name)``.
``CALL``       parent       ``(name, args, kwargs)``: call ``env.name(...)``.
``RESULT``     worker       the value of the last ``ACCESS`` / ``CALL`` / ``CLOSE``.
``EXCEPTION``  worker       a :class:`RemoteException`: what went wrong, whole.
``CLOSE``      parent       ``None``: close the env, answer ``RESULT`` and exit.
``FAST_LOOP``  parent       a :class:`FastLoopSpec`: attach to the shared region,
                            answer ``RESULT``, then serve step/reset jobs from
                            the native job slot until it says CLOSE; pipe
                            requests are then served when the slot says CALL.
=============  ===========  ====================================================

Every request is answered by exactly one ``RESULT`` or ``EXCEPTION``, in order,
so many calls can be in flight: each returns a promise that, when called,
receives answers until its own has arrived (earlier answers are kept for their
promises).

Waiting never hangs on a dead worker: the parent waits on the pipe *and* the
process sentinel, so a worker that dies (crash, signal, ``os._exit``) turns into
:class:`~alf_env.errors.WorkerDiedError` naming the env id and the exit code or
signal. :func:`resolve_all` waits for the promises of many workers together
(one deadline, a death raised at once, an exception raised once all have
answered); :func:`wait_start_all` does the same for starting workers. A
promise that is dropped unused gives up its answer. A worker whose parent
dies exits by itself (a watchdog thread polls a pidfd of the parent). Workers
ignore SIGINT, so Ctrl-C in the foreground raises one ``KeyboardInterrupt`` in
the parent instead of a traceback per worker. ``close()`` is bounded
(``CLOSE_*`` below) and logs what the env's own ``close()`` raised.

Shutdown
--------
Every started, unclosed worker is in one registry, and one ``atexit`` hook
(installed at the first ``start()``) stops them however the script ends (end
of the script without ``close()``, ``del env``, an exception, ``sys.exit()``,
Ctrl-C): :func:`shutdown` first brings the workers of the shared-memory front
ends back from their native loop (:func:`register_board`), then
:func:`stop_all` sends CLOSE to every worker at once, waits for all of them
together under one deadline (``EXIT_POLITE_TIMEOUT``), SIGTERMs the ones still
running, then SIGKILLs, and reaps every one. No thread, thread pool or import
is needed. ``close()`` and :func:`close_all` use the same :func:`stop_all`
(with ``CLOSE_POLITE_TIMEOUT``). At the first ``start()`` in the main thread a
SIGTERM handler is installed, unless the program has its own: SIGTERM then
raises ``SystemExit(143)`` (``128 + SIGTERM``, what a shell reports for a
process ended by SIGTERM), so ``finally`` blocks and ``atexit`` hooks run and
the workers are closed like at a normal exit. Workers restore the default
SIGTERM action (they end at once when terminated).

For an ``AlfEnvironment`` the worker checks actions and time steps against the
env's specs (:mod:`alf_env.control_plane.spec_checks`), so a mismatch is a
``ValueError`` naming the field, raised where it happens.
"""

import atexit
import enum
import functools
import inspect
import multiprocessing
import multiprocessing.connection
import multiprocessing.resource_tracker
import multiprocessing.util  # noqa: F401 -- its exit hook must be registered before ours
import os
import pickle
import select
import signal
import sys
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cloudpickle
from absl import logging

from alf_env import nest
from alf_env.errors import (EnvironmentClosedError, EnvironmentProcessError,
                            EnvTimeoutError, WorkerDiedError, describe_exit)

START_METHODS = ("fork", "spawn", "forkserver")

# Seconds the parent waits for a worker to exit after asking it politely, then
# after SIGTERM, then after SIGKILL. Their sum bounds ``close()``.
CLOSE_POLITE_TIMEOUT = 5.0
CLOSE_TERMINATE_TIMEOUT = 1.0
CLOSE_KILL_TIMEOUT = 1.0

# After the worker's sentinel fires, how long to wait for data it may have
# written just before exiting (an exception report) to become readable.
_DEATH_GRACE = 0.05

# When the program exits (or gets SIGTERM) with workers still running, they
# get this long, all together, to close their envs and exit; then SIGTERM and
# SIGKILL, each followed by the wait below. Close explicitly for a longer
# polite wait (CLOSE_POLITE_TIMEOUT).
EXIT_POLITE_TIMEOUT = 1.0
EXIT_TERMINATE_TIMEOUT = 0.25
EXIT_KILL_TIMEOUT = 0.25

# The exit status after SIGTERM (see "Shutdown" in the module doc).
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM

# How often a worker without pidfd support checks whether its parent is alive.
_PARENT_POLL_INTERVAL = 0.2


class MessageType(enum.Enum):
    """The messages of the parent <-> worker pipe protocol (see module doc)."""
    READY = 1
    ACCESS = 2
    CALL = 3
    RESULT = 4
    EXCEPTION = 5
    CLOSE = 6
    FAST_LOOP = 7
    STEP_PACKED = 8   # payload: the action as one packed record (leaf_codec)
    RESET_PACKED = 9  # payload: None; both answered by RESULT with a packed time step


# Messages whose payload is plain data (bytes, None): pickled by the plain
# pickler, which costs about half of what ``Connection.send`` costs (it builds
# a ``ForkingPickler`` with multiprocessing's reducers for every message).
# The bytes on the pipe are the same, so ``Connection.recv`` reads them.
_PLAIN_MESSAGES = frozenset([MessageType.STEP_PACKED, MessageType.RESET_PACKED])
_plain_dumps = functools.partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL)


class _State(enum.Enum):
    """Life cycle of a :class:`ProcessEnvironment`."""
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    DEAD = "dead"
    CLOSED = "closed"


class RemoteException:
    """An exception raised in a worker, in a form that always crosses the pipe.

    Attributes:
        exception: the original exception if it survives a pickle round trip,
            else ``None``.
        type_name: qualified name of the exception type.
        message: ``str()`` of the exception.
        traceback_text: the worker-side traceback.
        env_id: the env whose worker raised.
        during: what the worker was doing (e.g. ``"step"``).
    """

    def __init__(self, exc: BaseException, env_id: Optional[int],
                 during: str) -> None:
        self.type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        self.message = str(exc)
        self.traceback_text = "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.env_id = env_id
        self.during = during
        self.exception = _picklable_or_none(exc)

    def to_exception(self) -> BaseException:
        """Builds the exception to raise in the parent.

        Returns the original exception type when it could be pickled, chained
        (``__cause__``) to an :class:`EnvironmentProcessError` that carries
        the worker's traceback and env id; otherwise an
        :class:`EnvironmentProcessError` with all of that in its message.
        """
        header = (f"{self.type_name} raised in the worker of env {self.env_id} "
                  f"during {self.during}")
        remote = EnvironmentProcessError(
            f"{header}: {self.message}\nWorker traceback:\n{self.traceback_text}",
            self.env_id, self.traceback_text)
        if self.exception is None:
            return remote
        exc = self.exception
        exc.__cause__ = remote
        if hasattr(exc, "add_note"):
            exc.add_note(f"({header}; worker traceback in __cause__)")
        return exc


class RemoteMethod:
    """The answer to ``ACCESS`` of a method: the parent calls it remotely."""

    def __init__(self, name: str) -> None:
        self.name = name


def _picklable_or_none(exc: BaseException) -> Optional[BaseException]:
    """Returns ``exc`` if it survives a pickle round trip, else ``None``."""
    try:
        restored = pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 -- any failure means "not picklable"
        return None
    return exc if type(restored) is type(exc) else None


# ----------------------------------------------------------------------------
# Worker side
# ----------------------------------------------------------------------------


def _watch_parent(parent_pid: int) -> None:
    """Exits this worker as soon as ``parent_pid`` is gone (runs in a thread)."""
    try:
        fd = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os._exit(0)
    except (AttributeError, OSError):
        # No pidfd support: poll. A reparented worker sees a new ppid.
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_INTERVAL)
        os._exit(0)
    select.select([fd], [], [])
    os._exit(0)


def start_parent_watchdog(parent_pid: int) -> None:
    """Starts a daemon thread that ends this process when its parent dies.

    Used by every alf_env worker, so that killing the trainer (even with
    SIGKILL) never leaves workers behind. Under ``forkserver`` the OS parent
    is the fork server, so the trainer's pid is passed explicitly.
    """
    threading.Thread(target=_watch_parent, args=(parent_pid,),
                     name="alf_env-parent-watchdog", daemon=True).start()


def worker_signals() -> None:
    """Sets up a worker's signals: SIGINT ignored, SIGTERM ends it at once.

    A worker is started with SIGINT ignored and SIGINT and SIGTERM blocked
    (see :class:`_signals_deferred`): a Ctrl-C meant for the trainer is
    dropped here; the trainer's SIGTERM handler (inherited under ``fork``)
    gives way to the default action before a SIGTERM that arrived meanwhile
    is delivered, so terminating a worker that just started ends it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _DEFERRED_SIGNALS)


def _construct(env_constructor: Callable[..., Any], env_id: Optional[int]) -> Any:
    """Calls ``env_constructor``, passing ``env_id`` when it accepts one."""
    try:
        params = inspect.signature(env_constructor).parameters
    except (TypeError, ValueError):
        params = {}
    accepts = "env_id" in params or any(
        p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    return env_constructor(env_id=env_id) if accepts else env_constructor()


# The CALL name of ProcessEnvironment.sync_progress: the worker forwards the
# progress to the env only if the env defines ``sync_progress`` (no env
# method can have this name).
SYNC_PROGRESS_CALL = "<sync_progress>"


def forward_progress(env: Any, progress: Any) -> bool:
    """Calls ``env.sync_progress(progress)`` if ``env`` defines it; returns whether it did."""
    sync = getattr(env, "sync_progress", None)
    if not callable(sync):
        return False
    sync(progress)
    return True


class _WorkerEnvProxy:
    """What the worker calls: the env, plus packing/unpacking in flatten mode.

    For an ``AlfEnvironment`` it also checks, around ``step`` and ``reset``,
    the action it receives and the time step the env returns against the
    env's specs (see :mod:`alf_env.control_plane.spec_checks`): a mismatch
    raises ``ValueError`` naming the field, before the env is touched for an
    action, instead of a confusing error (or silently wrong data) later.
    """

    def __init__(self, env: Any, flatten: bool, env_id: Optional[int] = None) -> None:
        self.env = env
        self.flatten = flatten
        self.env_id = env_id
        self._guard: Any = None
        self._guard_built = False
        self._codecs: Any = None

    def access(self, name: str) -> Any:
        """Reads an attribute; a method is answered by a marker to call it remotely."""
        value = getattr(self.env, name)
        if inspect.ismethod(value) or inspect.isbuiltin(value):
            return RemoteMethod(name)
        return value

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        if name == SYNC_PROGRESS_CALL:
            return forward_progress(self.env, *args, **kwargs)
        guard = self.guard() if name in ("step", "reset") else None
        if name == "step" and len(args) == 1 and not kwargs:
            (action,) = args
            if guard is not None:
                guard.action.check(action, flattened=self.flatten)
            if self.flatten:
                args = (nest.pack_sequence_as(self.env.action_spec(), action),)
        result = getattr(self.env, name)(*args, **kwargs)
        if name == "step" or name == "reset":
            if guard is not None:
                checked = guard.time_step
                return checked.flat(result) if self.flatten else checked(result)
            if self.flatten:
                return nest.flatten(result)
        return result

    def step_packed(self, record: bytes) -> bytes:
        """Steps with a packed action; returns the packed, checked time step."""
        codecs = self._codecs or self._build_codecs()
        return self._pack(self.env.step(codecs.unpack_action(record)))

    def reset_packed(self) -> bytes:
        """Resets; returns the packed, checked time step."""
        if self._codecs is None:
            self._build_codecs()
        return self._pack(self.env.reset())

    def _pack(self, time_step: Any) -> bytes:
        codec = self._codecs.time_step
        record = codec.encode_exact(self._codecs.flatten_time_step(time_step))
        if record is not None:
            return record  # every leaf has the spec's exact shape and dtype
        guard = self.guard()  # names what does not fit, casts what may be cast
        leaves = guard.time_step.flat(time_step) if guard is not None else nest.flatten(
            time_step)
        return codec.encode(leaves)

    def _build_codecs(self) -> Any:
        """The ``StepCodecs`` of the packed messages."""
        from alf_env.control_plane.leaf_codec import StepCodecs
        env = self.env
        self._codecs = StepCodecs(env.action_spec(), env.time_step_spec(),
                                  env.batch_size if env.batched else 0)
        return self._codecs

    def guard(self) -> Any:
        """The env's spec guard (built at the first step/reset), or ``None``."""
        if not self._guard_built:
            from alf_env.control_plane.spec_checks import WorkerSpecGuard
            self._guard = WorkerSpecGuard.for_env(self.env, self.env_id)
            self._guard_built = True
        return self._guard


def _worker_main(conn: multiprocessing.connection.Connection,
                 env_constructor: Any, env_id: Optional[int], flatten: bool,
                 torch_num_threads: Optional[int], parent_pid: int,
                 pickled: bool) -> None:
    """Entry point of a worker process: construct the env, then serve calls."""
    worker_signals()
    start_parent_watchdog(parent_pid)
    if torch_num_threads is not None:
        import torch
        torch.set_num_threads(torch_num_threads)
    try:
        if pickled:
            env_constructor = cloudpickle.loads(env_constructor)
        env = _construct(env_constructor, env_id)
    except BaseException as exc:  # noqa: BLE001 -- reported to the parent
        conn.send((MessageType.EXCEPTION, RemoteException(exc, env_id, "construction")))
        conn.close()
        return
    conn.send((MessageType.READY, None))
    proxy = _WorkerEnvProxy(env, flatten, env_id)
    try:
        serve(conn, proxy, env_id)
    finally:
        conn.close()
    _exit_worker()


def _exit_worker() -> None:
    """Ends a worker whose env is closed, skipping the interpreter's teardown.

    Does what ``multiprocessing`` does when a worker's target returns (its
    exit function, flushing the standard streams), then ``os._exit(0)`` as a
    ``fork`` worker does anyway. A ``spawn`` or ``forkserver`` worker would
    otherwise tear its interpreter down, which takes hundreds of
    milliseconds of CPU with torch loaded: n workers closing at once on a few
    cores took seconds.
    """
    multiprocessing.util._exit_function()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(0)


def serve(conn: multiprocessing.connection.Connection, proxy: _WorkerEnvProxy,
          env_id: Optional[int]) -> None:
    """Answers requests on ``conn`` until ``CLOSE`` or until the pipe closes."""
    while True:
        try:
            msg_type, payload = conn.recv()
        except (EOFError, OSError):
            # The parent closed its end (or died): nothing left to serve.
            _close_quietly(proxy.env, env_id)
            return
        if not handle_message(conn, proxy, env_id, msg_type, payload):
            return


def handle_message(conn: multiprocessing.connection.Connection,
                   proxy: _WorkerEnvProxy, env_id: Optional[int],
                   msg_type: MessageType, payload: Any) -> bool:
    """Handles one request; returns False when the worker should exit."""
    if msg_type is MessageType.ACCESS:
        _answer(conn, env_id, f"access to {payload!r}",
                lambda: proxy.access(payload))
        return True
    if msg_type is MessageType.CALL:
        name, args, kwargs = payload
        _answer(conn, env_id, name, lambda: proxy.call(name, args, kwargs))
        return True
    if msg_type is MessageType.CLOSE:
        _answer(conn, env_id, "close", proxy.env.close)
        return False
    if msg_type is MessageType.STEP_PACKED:
        _answer(conn, env_id, "step", lambda: proxy.step_packed(payload), plain=True)
        return True
    if msg_type is MessageType.RESET_PACKED:
        _answer(conn, env_id, "reset", proxy.reset_packed, plain=True)
        return True
    if msg_type is MessageType.FAST_LOOP:
        # Imported here: only FastParallelEnvironment's workers need it.
        from alf_env.data_plane.job_loop import run_fast_loop
        return run_fast_loop(conn, proxy, env_id, payload)
    if msg_type in (MessageType.READY, MessageType.RESULT, MessageType.EXCEPTION):
        raise ValueError(f"env {env_id} worker: {msg_type} is sent by workers, "
                         f"not to them")
    raise ValueError(f"env {env_id} worker: unknown message type {msg_type!r}")


def _answer(conn: multiprocessing.connection.Connection, env_id: Optional[int],
            during: str, fn: Callable[[], Any], plain: bool = False) -> None:
    """Runs ``fn`` and sends its value as RESULT, or what it raised as EXCEPTION.

    ``plain``: the value is ``bytes`` (a packed record), pickled without
    ``multiprocessing``'s reducers (see ``_PLAIN_MESSAGES``).
    """
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 -- reported to the parent
        conn.send((MessageType.EXCEPTION, RemoteException(exc, env_id, during)))
        return
    if plain:
        conn.send_bytes(_plain_dumps((MessageType.RESULT, value)))
        return
    try:
        conn.send((MessageType.RESULT, value))
    except Exception as exc:  # noqa: BLE001 -- e.g. an unpicklable result
        conn.send((MessageType.EXCEPTION, RemoteException(
            exc, env_id, f"sending the result of {during}")))


def _close_quietly(env: Any, env_id: Optional[int]) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 -- the parent is gone; nobody to tell
        logging.exception("env %s: close() raised while shutting down", env_id)


# ----------------------------------------------------------------------------
# Parent side
# ----------------------------------------------------------------------------


class _Registry:
    """The started, unclosed workers of this process and the boards that drive
    some of them (see "Shutdown" in the module doc).

    Workers are held strongly: one dropped without ``close()`` (``del env``,
    or its front end garbage-collected) still has its process and pipe, so it
    is closed at exit like the others. ``close()`` removes it.
    """

    def __init__(self) -> None:
        self.envs: Dict[int, "ProcessEnvironment"] = {}
        self.boards: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.hooks_installed = False
        self.exiting = False  # shutdown() runs: exit-time bounds, SIGTERM ignored
        self.pid = os.getpid()  # the process whose workers these are


_registry = _Registry()


def register_board(board: Any) -> None:
    """Lets :func:`shutdown` bring a board's workers back from the native loop.

    Args:
        board: an object with ``release(timeout)`` (a ``fast_jobs.JobBoard``);
            held weakly.
    """
    _registry.boards.add(board)


def _install_hooks() -> None:
    """Installs the exit hook and (main thread, no handler of the program's own)
    the SIGTERM handler, once."""
    if _registry.hooks_installed:
        return
    _registry.hooks_installed = True
    # Registered after multiprocessing's own exit hook (imported above), so it
    # runs first (atexit is LIFO): workers are closed, not just terminated.
    atexit.register(_at_exit)
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        _registry.pid = os.getpid()
        signal.signal(signal.SIGTERM, _on_sigterm)


def _at_exit() -> None:
    shutdown()
    _registry.exiting = True  # from now on a SIGTERM has nothing left to do


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM: exit like ``sys.exit(SIGTERM_EXIT_CODE)`` (``finally`` and atexit run)."""
    if os.getpid() != _registry.pid:
        # A forked worker that has not yet restored the default action
        # (worker_signals): end as the default action would.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if _registry.exiting:
        return  # already shutting down: let it finish
    raise SystemExit(SIGTERM_EXIT_CODE)


def shutdown(polite_timeout: Optional[float] = None) -> None:
    """Stops every worker of this process still running, all at once.

    What the exit hook (and so SIGTERM) runs; safe to call at any time (later
    uses of the closed envs raise ``EnvironmentClosedError``). Workers in a
    native loop are brought back first (each board all at once), then every
    worker gets CLOSE and all are waited for together; stragglers are
    terminated, then killed, and every worker is reaped.

    Args:
        polite_timeout: seconds for all of that together before SIGTERM
            (default ``EXIT_POLITE_TIMEOUT``).
    """
    if polite_timeout is None:
        polite_timeout = EXIT_POLITE_TIMEOUT
    deadline = time.monotonic() + polite_timeout
    _registry.exiting = True
    try:
        for board in list(_registry.boards):
            board.release(max(0.0, deadline - time.monotonic()))
        stop_all(list(_registry.envs.values()), max(0.0, deadline - time.monotonic()))
    finally:
        _registry.exiting = False


def _escalation_timeouts() -> Tuple[float, float]:
    """Seconds to wait after SIGTERM, then after SIGKILL (shorter at exit)."""
    if _registry.exiting:
        return EXIT_TERMINATE_TIMEOUT, EXIT_KILL_TIMEOUT
    return CLOSE_TERMINATE_TIMEOUT, CLOSE_KILL_TIMEOUT


class _Stopping:
    """One worker that :func:`stop_all` is ending."""

    def __init__(self, env: "ProcessEnvironment", polite: bool) -> None:
        self.env = env
        self.process = env._process
        self.conn = env._conn
        self.polite = polite
        # Answers still to read: every request's, then CLOSE's (its failure is logged).
        self.next_seq = env._received_seq
        self.close_seq = env._next_seq if polite else -1
        self.reading = polite
        self.exited = self.process.exitcode is not None

    def read(self) -> None:
        """Reads what the worker sent (without blocking); logs a failed close()."""
        conn = self.conn
        try:
            while self.reading and conn.poll(0):
                msg_type, payload = conn.recv()
                if self.next_seq == self.close_seq and msg_type is MessageType.EXCEPTION:
                    error = payload.to_exception()
                    if isinstance(error.__cause__, EnvironmentProcessError):
                        error = error.__cause__  # its message has the worker traceback
                    logging.warning("env %s: close() raised in the worker: %s",
                                    self.env._env_id, error)
                self.next_seq += 1
                self.reading = self.next_seq <= self.close_seq
        except (EOFError, OSError):
            self.reading = False

    def on_exit(self) -> None:
        """The worker's sentinel fired: reap it and read its last words."""
        self.process.join(_DEATH_GRACE)
        self.exited = self.process.exitcode is not None
        if self.reading:
            self.read()
        if self.polite and self.process.exitcode:
            logging.warning("env %s: the worker died while closing: %s",
                            self.env._env_id, describe_exit(self.process.exitcode))


def _wait_for_exits(stopping: "List[_Stopping]", deadline: float) -> None:
    """Waits until every worker of ``stopping`` exited or ``deadline`` passed,
    reading their pipes meanwhile (so none blocks on a full pipe)."""
    poller = select.poll()
    by_fd: Dict[int, Tuple[_Stopping, bool]] = {}
    for s in stopping:
        if s.exited:
            continue
        poller.register(s.process.sentinel, select.POLLIN)
        by_fd[s.process.sentinel] = (s, True)
        if s.reading:
            poller.register(s.conn.fileno(), select.POLLIN)
            by_fd[s.conn.fileno()] = (s, False)
    while any(not s.exited for s in stopping):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        for fd, _ in poller.poll(int(remaining * 1000) + 1):
            if fd not in by_fd:
                continue  # a pipe dropped while handling an earlier event
            s, is_sentinel = by_fd[fd]
            if is_sentinel:
                poller.unregister(fd)
                s.on_exit()
            elif s.reading:
                s.read()
            conn_fd = s.conn.fileno()
            if not s.reading and conn_fd in by_fd:
                poller.unregister(conn_fd)
                del by_fd[conn_fd]


def stop_all(envs: "Sequence[ProcessEnvironment]", polite_timeout: Optional[float] = None
             ) -> None:
    """Closes ``envs`` all at once, with one deadline; never raises because of them.

    Every running worker is sent CLOSE first (a worker in a native loop, or
    one not yet started, is terminated instead: it would not read it), then
    all are waited for together for ``polite_timeout`` s; those still running
    get SIGTERM, then SIGKILL, each followed by one wait for all. Every
    worker is reaped. So ``n`` workers take about as long as the slowest one,
    and at most ``polite_timeout + CLOSE_TERMINATE_TIMEOUT +
    CLOSE_KILL_TIMEOUT`` (the ``EXIT_*`` bounds at exit). Interrupted (e.g. by
    Ctrl-C), it kills the workers still running at once, reaps them and
    re-raises.

    Args:
        envs: the workers; closed ones and ones never started are skipped.
        polite_timeout: seconds to let them close their envs (default
            ``CLOSE_POLITE_TIMEOUT``).
    """
    if polite_timeout is None:
        polite_timeout = CLOSE_POLITE_TIMEOUT
    deadline = time.monotonic() + polite_timeout
    stopping: List[_Stopping] = []
    try:
        for env in envs:
            s = env._begin_close()
            if s is not None:
                stopping.append(s)
        if not stopping:
            return
        _wait_for_exits(stopping, deadline)
        late = [s for s in stopping if not s.exited]
        if not late:
            return
        # At exit nobody can act on it (and a busy machine is reason enough).
        log = logging.info if _registry.exiting else logging.warning
        for s in late:
            if s.polite and polite_timeout > 0:
                log("env %s: the worker (pid %s) did not exit within %.1f s; "
                    "terminating it", s.env._env_id, s.process.pid, polite_timeout)
            s.polite = False  # its death is expected now
            s.process.terminate()
        terminate_wait, kill_wait = _escalation_timeouts()
        _wait_for_exits(late, time.monotonic() + terminate_wait)
        late = [s for s in late if not s.exited]
        for s in late:
            s.process.kill()
        _wait_for_exits(late, time.monotonic() + kill_wait)
    except BaseException:
        # Interrupted: end the rest now rather than leave them behind.
        for s in stopping:
            if not s.exited:
                s.polite = False
                s.process.kill()
        _wait_for_exits(stopping, time.monotonic() + CLOSE_KILL_TIMEOUT)
        raise
    finally:
        for s in stopping:
            s.env._end_close(s)


def _call_blocking(env: "ProcessEnvironment", name: str, *args, **kwargs) -> Any:
    return env.call(name, *args, **kwargs)()


class _Promise:
    """The pending answer of one request; call it to wait for the value."""

    def __init__(self, env: "ProcessEnvironment", seq: int,
                 transform: Optional[Callable[[Any], Any]] = None) -> None:
        self._env = env
        self._seq = seq
        self._transform = transform

    def __call__(self, timeout: Optional[float] = None) -> Any:
        """Waits for the answer.

        Args:
            timeout: seconds to wait at most (``None``: no limit).
        Returns:
            the value the worker sent.
        Raises:
            EnvTimeoutError: ``timeout`` passed first.
            WorkerDiedError: the worker died before answering.
            Exception: what the worker raised (see :class:`RemoteException`).
        """
        value = self._env._await(self._seq, timeout)
        return self._transform(value) if self._transform else value

    def __del__(self) -> None:
        # Dropped unused (e.g. the pending reset of a spare at a new reset()):
        # its answer must not be kept forever.
        try:
            self._env._abandon(self._seq)
        except Exception:  # noqa: BLE001 -- e.g. at interpreter shutdown
            pass


class ProcessEnvironment:
    """Runs one environment in a worker process (the control plane).

    Args:
        env_constructor: callable returning the environment; it gets
            ``env_id=`` when its signature accepts it. With ``spawn`` and
            ``forkserver`` it is sent with cloudpickle, so lambdas and
            closures work.
        env_id: id of the env, passed to the constructor and used in errors.
        flatten: send actions and time steps as flat lists (cheaper to
            pickle); packed back on either side.
        fast: the worker will run the native shared-memory loop of
            ``FastParallelEnvironment`` (which sets this; see
            :meth:`start_fast_loop`).
        num_envs: number of envs sharing the native region (``fast`` only;
            ``env_id`` must be below it).
        hosted_envs: how many envs the worker hosts (ids ``env_id`` to
            ``env_id + hosted_envs - 1``); a ``WorkerDiedError`` names them all.
        torch_num_threads_per_env: ``torch.set_num_threads`` in the worker
            (``None`` leaves torch alone and does not import it).
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``.
        name: a name for the worker process (shown by ``ps``-like tools).
    """

    def __init__(self, env_constructor: Callable[..., Any],
                 env_id: Optional[int] = None, flatten: bool = False,
                 fast: bool = False, num_envs: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1,
                 start_method: str = "fork", name: str = "", hosted_envs: int = 1) -> None:
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
        self._name = name or f"alf_env-worker-{env_id if env_id is not None else 0}"
        self._ctx = multiprocessing.get_context(start_method)
        self._state = _State.NEW
        self._conn: Optional[multiprocessing.connection.Connection] = None
        self._process: Optional[multiprocessing.process.BaseProcess] = None
        self._pid: Optional[int] = None
        self._death: Optional[WorkerDiedError] = None
        self._next_seq = 0        # sequence number of the next request
        self._received_seq = 0    # sequence number of the next answer to read
        self._answers: Dict[int, Tuple[MessageType, Any]] = {}
        # Requests whose promises were dropped unused: their answers are discarded.
        self._abandoned: set = set()
        self._spec_cache: Dict[str, Any] = {}
        self._codecs: Any = None  # StepCodecs, False (no ALF specs) or None (not known)
        # Set while the worker runs the native loop: rung after every pipe
        # request so the worker reads it (see FastParallelEnvironment).
        self._doorbell: Optional[Callable[[], None]] = None

    # -- life cycle ----------------------------------------------------------

    def start(self, wait_to_start: bool = True) -> None:
        """Starts the worker process.

        Args:
            wait_to_start: wait until the env is constructed (and raise what
                its constructor raised); otherwise call :meth:`wait_start`.
        Raises:
            RuntimeError: the env was already started.
            EnvironmentClosedError: the env was closed.
        """
        if self._state is _State.CLOSED:
            raise EnvironmentClosedError(f"env {self._env_id} is closed; create a new one")
        if self._state is not _State.NEW:
            raise RuntimeError(f"env {self._env_id}: start() called twice "
                               f"(state is {self._state.value})")
        parent_conn, child_conn = self._ctx.Pipe()
        pickled = self._start_method != "fork"
        constructor = (cloudpickle.dumps(self._env_constructor) if pickled
                       else self._env_constructor)
        process = self._ctx.Process(
            target=_worker_main, name=self._name, daemon=True,
            args=(child_conn, constructor, self._env_id, self._flatten,
                  self._torch_num_threads, os.getpid(), pickled))
        _install_hooks()
        try:
            with _signals_deferred(self._start_method):
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
        self._state = _State.STARTING
        _registry.envs[id(self)] = self
        if wait_to_start:
            self.wait_start()

    def wait_start(self) -> None:
        """Waits until the worker has constructed its env.

        Raises:
            Exception: what the env constructor raised (the worker is reaped).
            WorkerDiedError: the worker died during construction.
        """
        if self._state is _State.RUNNING:
            return
        if self._state is not _State.STARTING:
            raise RuntimeError(f"env {self._env_id}: wait_start() needs a started "
                               f"env (state is {self._state.value})")
        try:
            msg_type, payload = self._recv(None, during="start")
        except BaseException:
            self.close()
            raise
        if msg_type is MessageType.READY:
            self._state = _State.RUNNING
            return
        self.close()
        if msg_type is MessageType.EXCEPTION:
            raise payload.to_exception()
        raise EnvironmentProcessError(
            f"env {self._env_id}: expected READY from the worker, got {msg_type}",
            self._env_id)

    def close(self, polite_timeout: Optional[float] = None) -> None:
        """Closes the env and ends the worker; safe to call repeatedly.

        Asks the worker to close its env, waits up to ``polite_timeout`` s
        (default ``CLOSE_POLITE_TIMEOUT``), then terminates, then kills it;
        so it returns within ``polite_timeout + CLOSE_TERMINATE_TIMEOUT +
        CLOSE_KILL_TIMEOUT`` s. Never raises because of the worker's state:
        an exception raised by the env's own ``close()``, or the worker
        dying while closing, is logged as a warning (with the env id and the
        worker's traceback), since it happens while everything is torn down.
        To close many envs, :func:`close_all` waits for all of them at once.
        """
        stop_all([self], polite_timeout)

    def _begin_close(self) -> Optional[_Stopping]:
        """First step of :func:`stop_all`: marks the env closed, tells the worker.

        Returns:
            what ``stop_all`` waits for, or ``None`` if there is no worker.
        """
        if self._state is _State.CLOSED:
            return None
        in_fast_loop = self._doorbell is not None
        self._doorbell = None
        polite = (self._state is _State.RUNNING and not in_fast_loop
                  and self._process.exitcode is None)
        started = self._state is not _State.NEW
        self._state = _State.CLOSED
        _registry.envs.pop(id(self), None)
        if not started:
            return None
        if polite:
            try:
                self._conn.send((MessageType.CLOSE, None))
            except (OSError, ValueError):
                polite = False
        stopping = _Stopping(self, polite)
        if not polite and not stopping.exited:
            # It would not read CLOSE (not started yet, or in a native loop
            # that the caller could not bring it back from).
            self._process.terminate()
        return stopping

    def _end_close(self, stopping: _Stopping) -> None:
        """Last step of :func:`stop_all`: releases the process and the pipe."""
        process = stopping.process
        if process.exitcode is None:
            logging.error("env %s: the worker (pid %s) survived SIGKILL", self._env_id,
                          process.pid)
        else:
            process.close()
        self._conn.close()
        self._answers.clear()
        self._abandoned.clear()

    def __enter__(self) -> "ProcessEnvironment":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- requests ------------------------------------------------------------

    def call(self, name: str, *args, **kwargs) -> _Promise:
        """Calls ``env.name(*args, **kwargs)`` in the worker.

        Returns:
            a promise; call it (optionally with ``timeout=``) for the value.
            A promise that is dropped without being called gives up its
            answer (it is discarded when it arrives).
        """
        return self._request(MessageType.CALL, (name, args, kwargs))

    def access(self, name: str) -> _Promise:
        """Reads ``env.name`` in the worker; returns a promise."""
        return self._request(MessageType.ACCESS, name)

    def step(self, action: Any, blocking: bool = True) -> Any:
        """Steps the env.

        For an ``AlfEnvironment`` the worker checks ``action`` against the
        action spec before stepping (``ValueError`` naming the field and the
        expected shape and dtype for a wrong structure, shape, batch size or
        a dtype that does not cast safely; the env is not touched) and the
        time step against ``time_step_spec()``. Values outside the bounds of
        a ``BoundedTensorSpec`` are passed to the env unchanged (never
        clipped).

        Args:
            action: a nest matching ``action_spec()``.
            blocking: return the time step (True) or a promise of it (False).
        """
        codecs = self._step_codecs()
        record = codecs.pack_action(action) if codecs is not None else None
        if record is not None:  # an exact action: both ways as packed records
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
            promise = self._request(MessageType.RESET_PACKED, None,
                                    transform=codecs.unpack_time_step)
        else:
            promise = self._request(
                MessageType.CALL, ("reset", (), {}),
                transform=self._pack_time_step if self._flatten else None)
        return promise() if blocking else promise

    def _step_codecs(self) -> Any:
        """The env's ``StepCodecs`` (``None`` for an env without ALF specs)."""
        if self._codecs is None:
            from alf_env.control_plane.leaf_codec import StepCodecs
            try:
                # A tensor-based env's time steps stay torch tensors (pickled).
                if self._cached_attr("is_tensor_based"):
                    self._codecs = False
                else:
                    rows = self.batch_size if self.batched else 0
                    self._codecs = StepCodecs(self.action_spec(), self.time_step_spec(),
                                              rows)
            except AttributeError:
                self._codecs = False
        return self._codecs or None

    def step_packed(self, record: bytes, blocking: bool = True) -> Any:
        """Steps with an action packed by a ``LeafCodec`` of the env's action spec.

        The pipe path of ``ParallelAlfEnvironment``: the action was checked by
        the caller; the answer is the time step, checked against
        ``time_step_spec()`` in the worker and packed the same way (one
        ``bytes`` record; see :mod:`alf_env.control_plane.leaf_codec`).
        """
        promise = self._request(MessageType.STEP_PACKED, record)
        return promise() if blocking else promise

    def reset_packed(self, blocking: bool = True) -> Any:
        """Resets; the answer is the packed time step (see :meth:`step_packed`)."""
        promise = self._request(MessageType.RESET_PACKED, None)
        return promise() if blocking else promise

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders the env in the worker and returns the frame."""
        return self.call("render", mode)()

    def seed(self, seed: int) -> Any:
        """Seeds the env in the worker."""
        return self.call("seed", seed)()

    def sync_progress(self, progress: Any = None, blocking: bool = True) -> Any:
        """Forwards the trainer's training progress to the env (ALF's ``sync_progress``).

        Calls ``env.sync_progress(progress)`` in the worker if the env defines
        ``sync_progress``; an env that does not is left alone. ALF pushes its
        global scheduler progress this way so that schedules in the workers
        follow training; alf_env has no global progress, so the trainer
        passes the value (e.g. ``{"iterations": i, "env_steps": n}`` or a
        fraction). Unlike ALF (which does not wait), the call is answered, so
        an exception in the env's ``sync_progress`` is raised here; it is
        ordered with the other requests (the next ``step`` sees the progress).

        Args:
            progress: any picklable value.
            blocking: wait for the answer (``True``) or return a promise.

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
        return self._cached_attr("batched")

    @property
    def batch_size(self) -> Optional[int]:
        return self._cached_attr("batch_size")

    @property
    def env_id(self) -> Optional[int]:
        """The id this env was created with."""
        return self._env_id

    @property
    def pid(self) -> Optional[int]:
        """The worker's process id (``None`` before start)."""
        return self._pid

    @property
    def sentinel(self) -> Optional[int]:
        """A handle that becomes ready when the worker ends (``None`` when closed)."""
        if self._state in (_State.NEW, _State.CLOSED):
            return None
        return self._process.sentinel

    @property
    def connection(self) -> Optional[multiprocessing.connection.Connection]:
        """The parent's end of the pipe (for front ends that multiplex waits)."""
        return self._conn

    def __getattr__(self, name: str) -> Any:
        """Reads attribute ``name`` of the remote env (a method is called remotely).

        Only reached for names this object does not have itself. Names with
        one leading underscore are forwarded too (e.g. ``_rng`` of a
        ``RandomAlfEnvironment``); dunder names are not (``pickle`` and
        ``copy`` probe those), nor is anything before ``__init__`` ran.
        """
        if (name.startswith("__") and name.endswith("__")) or "_state" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self.access(name)()
        if isinstance(value, RemoteMethod):
            return functools.partial(_call_blocking, self, value.name)
        return value

    # -- native loop (FastParallelEnvironment) --------------------------------

    def start_fast_loop(self, spec: Any, doorbell: Callable[[], None]) -> None:
        """Moves the worker into the native shared-memory loop.

        Args:
            spec: a ``FastLoopSpec`` (shared block, worker index, rows, spin).
            doorbell: called after each later pipe request; it must make the
                worker serve that request (post a CALL job and wait for it).
        Raises:
            ValueError: this env was not created with ``fast=True``.
        """
        if not self._fast:
            raise ValueError(f"env {self._env_id}: start_fast_loop() needs an env "
                             f"created with fast=True")
        self._request(MessageType.FAST_LOOP, spec)()
        self._doorbell = doorbell

    @property
    def in_fast_loop(self) -> bool:
        """Whether the worker is serving the native loop (and is usable)."""
        return self._doorbell is not None and self._state is _State.RUNNING

    def stop_fast_loop(self) -> None:
        """Forgets the doorbell once the worker has left the native loop."""
        self._doorbell = None

    def pending_report(self) -> _Promise:
        """A promise of a message the worker sends unasked (a fast-path error).

        The worker answers requests in order, so the report is the answer
        after every request sent so far.
        """
        self._check_usable()
        return _Promise(self, self._take_seq())

    def mark_died(self, during: str) -> Exception:
        """Records that the worker died (seen by another channel); returns the error.

        ``EnvironmentClosedError`` if the env was closed meanwhile (e.g. by
        :func:`shutdown`).
        """
        if self._state is _State.CLOSED:
            return EnvironmentClosedError(
                f"env {self._env_id} is closed; create a new environment")
        if self._death is None:
            return self._died(during)
        return self._death

    # -- internals -----------------------------------------------------------

    def _cached_spec(self, name: str) -> Any:
        if name not in self._spec_cache:
            self._spec_cache[name] = self.call(name)()
        return self._spec_cache[name]

    def _cached_attr(self, name: str) -> Any:
        if name not in self._spec_cache:
            self._spec_cache[name] = self.access(name)()
        return self._spec_cache[name]

    def _pack_time_step(self, flat: List[Any]) -> Any:
        return nest.pack_sequence_as(self.time_step_spec(), flat)

    def _check_usable(self) -> None:
        if self._state is _State.RUNNING:
            return
        if self._state is _State.DEAD:
            raise self._death
        if self._state is _State.CLOSED:
            raise EnvironmentClosedError(
                f"env {self._env_id} is closed; create a new environment")
        if self._state is _State.STARTING:
            self.wait_start()
            return
        raise RuntimeError(f"env {self._env_id} is not started; call start() first")

    def _request(self, msg_type: MessageType, payload: Any,
                 transform: Optional[Callable[[Any], Any]] = None) -> _Promise:
        self._check_usable()
        try:
            if msg_type in _PLAIN_MESSAGES:
                self._conn.send_bytes(_plain_dumps((msg_type, payload)))
            else:
                self._conn.send((msg_type, payload))
        except (BrokenPipeError, ConnectionResetError):
            raise self._died("sending a request") from None
        if self._doorbell is not None:
            # The answer's place among the worker's messages is known only
            # once the doorbell has collected the worker's earlier jobs (a
            # failed one sends its report first, which takes the next place).
            try:
                self._doorbell()
            except BaseException:
                self._abandon(self._take_seq())
                raise
        return _Promise(self, self._take_seq(), transform)

    def _take_seq(self) -> int:
        """The sequence number of the next answer (request or report) to expect."""
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _abandon(self, seq: int) -> None:
        """Forgets the answer of request ``seq``: its promise was dropped unused."""
        if seq in self._answers:
            del self._answers[seq]
        elif seq >= self._received_seq and self._state is not _State.CLOSED:
            self._abandoned.add(seq)

    def _await(self, seq: int, timeout: Optional[float]) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while seq not in self._answers:
            self._check_usable()
            if seq < self._received_seq:
                raise RuntimeError(f"env {self._env_id}: this promise was already "
                                   f"fulfilled; a promise can be called once")
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._receive_one(remaining, during="a call")
        msg_type, payload = self._answers.pop(seq)
        if msg_type is MessageType.RESULT:
            return payload
        if msg_type is MessageType.EXCEPTION:
            raise payload.to_exception()
        raise EnvironmentProcessError(
            f"env {self._env_id}: expected RESULT or EXCEPTION from the worker, "
            f"got {msg_type}", self._env_id)

    def _has_answer(self, seq: int) -> bool:
        """Whether the answer of request ``seq`` was received (or already taken)."""
        return seq < self._received_seq

    def _receive_one(self, timeout: Optional[float], during: str) -> None:
        """Receives the next answer and keeps it for its promise (if still wanted)."""
        answer = self._recv(timeout, during)
        seq = self._received_seq
        self._received_seq += 1
        if self._abandoned and seq in self._abandoned:
            self._abandoned.discard(seq)
            return
        self._answers[seq] = answer

    def _recv(self, timeout: Optional[float], during: str) -> Tuple[MessageType, Any]:
        """Receives one message, watching the worker's sentinel meanwhile."""
        # One poll object per env (built at start): cheaper than
        # multiprocessing.connection.wait, which builds a selector per call.
        timeout_ms = None if timeout is None else int(timeout * 1000)
        ready = {fd for fd, _ in self._poller.poll(timeout_ms)}
        if not ready:
            raise EnvTimeoutError(
                f"env {self._env_id}: no answer from the worker within "
                f"{timeout:.3g} s during {during}")
        if self._conn.fileno() not in ready and not self._conn.poll(_DEATH_GRACE):
            raise self._died(during)
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            raise self._died(during) from None

    def _died(self, during: str) -> WorkerDiedError:
        """Records that the worker is gone and returns the error to raise."""
        self._process.join(CLOSE_KILL_TIMEOUT)
        self._death = WorkerDiedError(self._env_id, self._process.exitcode, during,
                                      env_ids=self._hosted_env_ids)
        self._state = _State.DEAD
        return self._death


def resolve_all(promises: Sequence[Callable[..., Any]], timeout: Optional[float] = None,
                during: str = "a call") -> List[Any]:
    """Waits for several promises (of one env or many) together; returns their values.

    All the workers involved are watched at once, so:

    * a worker that dies raises :class:`WorkerDiedError` as soon as it is
      seen, however long the others still take;
    * ``timeout`` bounds the whole wait; when it passes,
      :class:`EnvTimeoutError` (naming the envs still busy) is raised and no
      promise is used up: calling again with the same promises waits on;
    * an exception raised in a worker is re-raised (the first one, in the
      order of ``promises``) only once every promise has its answer, so all
      the workers are idle again and every pipe is in step.

    Args:
        promises: promises of ``ProcessEnvironment`` requests; other callables
            (e.g. values known already) are simply called.
        timeout: seconds for all of them together (``None``: no limit).
        during: what is awaited, for error messages (e.g. ``"step"``).

    Returns:
        the values, in the order of ``promises``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    waiting = [p for p in promises if isinstance(p, _Promise)]
    poller = select.poll()
    registered: Dict[int, ProcessEnvironment] = {}
    while True:
        busy: Dict[int, ProcessEnvironment] = {}
        for promise in waiting:
            env = promise._env
            if not env._has_answer(promise._seq):
                env._check_usable()
                busy[id(env)] = env
        if not busy:
            break
        for key in [k for k in registered if k not in busy]:
            env = registered.pop(key)
            poller.unregister(env._conn.fileno())
            poller.unregister(env._process.sentinel)
        by_fd: Dict[int, ProcessEnvironment] = {}
        for key, env in busy.items():
            if key not in registered:
                registered[key] = env
                poller.register(env._conn.fileno(), select.POLLIN)
                poller.register(env._process.sentinel, select.POLLIN)
            by_fd[env._conn.fileno()] = env
            by_fd[env._process.sentinel] = env
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = poller.poll(None if remaining is None else int(remaining * 1000))
        if not ready:
            ids = sorted(env.env_id for env in busy.values())
            raise EnvTimeoutError(f"envs {ids} gave no answer within {timeout:.3g} s "
                                  f"during {during}")
        for env in {id(by_fd[fd]): by_fd[fd] for fd, _ in ready}.values():
            env._receive_one(0.0, during)
    values, first_error = [], None
    for promise in promises:
        try:
            values.append(promise())
        except WorkerDiedError:
            raise
        except Exception as exc:  # noqa: BLE001 -- raised once all have answered
            first_error = exc if first_error is None else first_error
            values.append(None)
    if first_error is not None:
        raise first_error
    return values


def start_environments(envs: "Sequence[ProcessEnvironment]", start_serially: bool) -> None:
    """Starts ``envs`` one after another, or all at once and then waits for them.

    When they start at once, all of them are watched together, so a
    constructor that raises or a worker that dies is reported at once, not
    after the envs before it have started. On any failure every env is closed
    before the error propagates, so no worker is left behind.
    """
    try:
        if start_serially:
            for env in envs:
                env.start(wait_to_start=True)
        else:
            for env in envs:
                env.start(wait_to_start=False)
            wait_start_all(envs)
    except BaseException:
        close_all(envs)
        raise


def wait_start_all(envs: "Sequence[ProcessEnvironment]") -> None:
    """Waits until every started env has constructed its env, watching all at once.

    Raises at the first failure seen (a constructor that raised, a worker
    that died), without waiting for slower envs; the caller closes them.
    """
    pending = {id(env): env for env in envs if env._state is _State.STARTING}
    while pending:
        poller = select.poll()
        by_fd: Dict[int, ProcessEnvironment] = {}
        for env in pending.values():
            for fd in (env._conn.fileno(), env._process.sentinel):
                poller.register(fd, select.POLLIN)
                by_fd[fd] = env
        for fd, _ in poller.poll():
            env = by_fd[fd]
            if id(env) in pending:
                del pending[id(env)]
                env.wait_start()


def close_all(envs: "Sequence[ProcessEnvironment]",
              polite_timeout: Optional[float] = None) -> None:
    """Closes ``envs`` all at once (see :func:`stop_all`).

    A worker's exit can take a while (e.g. tearing down torch), so closing n
    workers this way costs about one exit, not n.

    Args:
        envs: the workers (closing never raises because of them).
        polite_timeout: as for :meth:`ProcessEnvironment.close`.
    """
    stop_all(envs, polite_timeout)


# Held back while a worker process starts (see _signals_deferred).
_DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class _signals_deferred:
    """Holds back SIGINT and SIGTERM while a worker starts.

    Around ``process.start()`` their handlers only record them: a Ctrl-C
    must not interrupt ``start()`` half way (a worker could be left without
    its parent knowing it), nor be lost (with SIG_IGN, a signal sent to the
    process is discarded when another thread, e.g. a BLAS thread, takes it).
    What was recorded is handed to the program's handlers once they are back
    (a ``KeyboardInterrupt`` for the default SIGINT handler).

    SIGINT is also blocked in this thread, so the worker is born with it
    blocked (the mask survives fork and exec) until it ignores it (see
    :func:`worker_signals`): a Ctrl-C while a spawned worker still imports
    prints no traceback there. multiprocessing's resource tracker unblocks
    SIGINT and SIGTERM when it starts, so it is started first. Under
    ``fork`` SIGTERM is blocked too, as the worker inherits the recording
    handler until it restores the default action; a ``spawn`` or
    ``forkserver`` worker starts with the default action, so terminating one
    that still imports ends it. Only possible in the main thread; elsewhere a
    no-op.
    """

    def __init__(self, start_method: str) -> None:
        self._start_method = start_method
        self._blocked = ([signal.SIGINT, signal.SIGTERM] if start_method == "fork"
                         else [signal.SIGINT])
        self._received: List[int] = []

    def _record(self, signum: int, frame: Any) -> None:
        self._received.append(signum)

    def __enter__(self) -> None:
        self._active = threading.current_thread() is threading.main_thread()
        if not self._active:
            return
        if self._start_method != "fork":
            multiprocessing.resource_tracker.ensure_running()
        self._previous = {sig: signal.signal(sig, self._record)
                          for sig in (signal.SIGINT, signal.SIGTERM)}
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, self._blocked)

    def __exit__(self, *exc_info) -> None:
        if not self._active:
            return
        for sig, handler in self._previous.items():
            # None: a handler set outside Python, which cannot be restored.
            if handler is None:
                handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        for sig in dict.fromkeys(self._received):
            handler = signal.getsignal(sig)
            if callable(handler):
                handler(sig, None)  # e.g. raises KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), sig)
