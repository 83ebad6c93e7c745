"""Shutdown: the registry of live workers, the exit hooks, and the bounded stop of many (why:
docs/reliability.md, "How a training script ends"). Set the timeouts below on this module."""

import atexit
import multiprocessing.process
import multiprocessing.util  # its exit hook must be registered before ours
import os
import select
import signal
import threading
import time
import weakref
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from absl import logging

from alf_env.control_plane.protocol import DEATH_GRACE, MessageType, read_message
from alf_env.errors import EnvironmentProcessError, describe_exit

# Seconds to exit when asked politely, then after SIGTERM: with KILL_TIMEOUT they bound
# ``close()``.
CLOSE_POLITE_TIMEOUT = 5.0
CLOSE_TERMINATE_TIMEOUT = 1.0

# The same at exit (or SIGTERM), for all the workers still running together.
EXIT_POLITE_TIMEOUT = 1.0
EXIT_TERMINATE_TIMEOUT = 0.25

# Seconds a worker may take to be gone after SIGKILL, at close and at exit. The wait ends as
# soon as it is: only the kernel acts then, within milliseconds, or as late as a stalled
# machine lets it (over 1 s seen on a loaded 2-core CI runner). A shorter bound would not end
# the script sooner (the interpreter's exit waits for its children) but would report a dying
# worker as a stuck one. One still there is stuck in the kernel: reported, and left to the
# system so that the exit does not wait for it.
KILL_TIMEOUT = 5.0

SIGTERM_EXIT_CODE = 128 + signal.SIGTERM

class Worker(Protocol):
    """What the registry holds and :func:`stop_all` ends (a ``WorkerChannel``)."""

    env_id: Optional[int]
    process: Any  # multiprocessing's BaseProcess
    conn: Any  # the parent's multiprocessing Connection
    received_seq: int  # the number of answers read so far
    next_seq: int  # the number of requests (and reports) sent so far

    def begin_close(self) -> Optional["Stopping"]:
        """Marks the worker closed and asks it to close (``None``: nothing to stop)."""

    def end_close(self, stopping: "Stopping") -> None:
        """Releases the process and the pipe once the worker is stopped."""

    def disown(self) -> None:
        """In a forked child: forgets the parent's worker without touching it."""


class HasWorker(Protocol):
    """A handle that owns a :class:`Worker` (a ``ProcessEnvironment``)."""

    @property
    def channel(self) -> Worker:
        """The worker's process and pipe."""


class Releasable(Protocol):
    """What :func:`shutdown` asks of a board (a ``JobBoard``)."""

    def release(self, timeout: Optional[float] = None) -> None:
        """Brings every worker back from the job loop; never raises."""


class _Registry:
    """This process's started, unclosed workers and their boards, held weakly."""

    def __init__(self) -> None:
        self.envs: "weakref.WeakValueDictionary[int, Worker]" = weakref.WeakValueDictionary()
        self.boards: "weakref.WeakSet[Releasable]" = weakref.WeakSet()
        self.hooks_installed = False
        self.exiting = False  # shutdown() runs: exit-time bounds, SIGTERM ignored
        self.pid = os.getpid()  # the process whose workers these are


_registry = _Registry()


def _forget_parent_workers() -> None:
    """In the child of every fork: forgets the parent's workers without touching them."""
    envs = list(_registry.envs.values())
    _registry.envs.clear()
    _registry.boards.clear()
    for env in envs:
        env.disown()


os.register_at_fork(after_in_child=_forget_parent_workers)


def register_board(board: Releasable) -> None:
    """Lets :func:`shutdown` bring the workers of ``board`` back from the job loop."""
    _registry.boards.add(board)


def register_worker(worker: Worker) -> "weakref.finalize[..., None]":
    """Registers a started worker; returns the finalizer that ends it if collected unclosed."""
    _registry.envs[id(worker)] = worker
    return _finalizer(worker, _end_process, worker.process, worker.conn, worker.env_id)


def unregister_worker(worker: Worker, finalizer: "Optional[weakref.finalize[..., None]]") -> None:
    """Takes a closing worker out of the registry and detaches its finalizer."""
    _registry.envs.pop(id(worker), None)
    if finalizer is not None:
        finalizer.detach()


def close_when_collected(owner: Any, envs: Sequence[HasWorker]) -> "weakref.finalize[..., None]":
    """Terminates the workers ``envs`` (as they are then) when ``owner`` is collected unclosed;
    returns the finalizer. A list is kept, not copied, so a worker a restart puts in it is
    ended too."""
    kept = envs if isinstance(envs, list) else list(envs)
    return _finalizer(owner, lambda: stop_all([env.channel for env in kept], 0.0))


def _finalizer(owner: Any, stop: Callable[..., None], *args: Any) -> "weakref.finalize[..., None]":
    """A finalizer of ``owner`` that runs ``stop(*args)`` only in this process, not at exit."""
    finalizer = weakref.finalize(owner, _in_process, os.getpid(), stop, args)
    finalizer.atexit = False
    return finalizer


def _in_process(pid: int, stop: Callable[..., None], args: Tuple[Any, ...]) -> None:
    """``stop(*args)`` if this is process ``pid``."""
    if os.getpid() == pid:
        stop(*args)


def _end_process(process: Any, conn: Any, env_id: Optional[int]) -> None:
    """Ends the process of a worker collected unclosed."""
    conn.close()
    if process.exitcode is None:
        process.terminate()
        process.join(CLOSE_TERMINATE_TIMEOUT)
    if process.exitcode is None:
        process.kill()
        process.join(KILL_TIMEOUT)
    release_process(process, env_id)


def release_process(process: Any, env_id: Optional[int]) -> None:
    """Closes the ended ``process``; one still there after SIGKILL is reported and forgotten.

    Such a worker is stuck in the kernel (or a second Ctrl-C cut the wait short): the
    interpreter's exit would wait for it without a bound, so multiprocessing forgets it.
    """
    if process.exitcode is not None:
        process.close()
        return
    logging.error("env %s: the worker (pid %s) was still there after SIGKILL; left for the "
                  "system to reap", env_id, process.pid)
    multiprocessing.process._children.discard(process)  # type: ignore[attr-defined]


def install_hooks() -> None:
    """Installs the exit hook and (main thread, no handler of its own) the SIGTERM handler."""
    if _registry.hooks_installed:
        return
    _registry.hooks_installed = True
    # After multiprocessing's (imported above), so it runs first: workers close politely.
    atexit.register(_at_exit)
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        _registry.pid = os.getpid()
        signal.signal(signal.SIGTERM, _on_sigterm)


def _at_exit() -> None:
    shutdown()
    _registry.exiting = True  # from now on a SIGTERM has nothing left to do


def _on_sigterm(signum: int, frame: Optional[FrameType]) -> None:
    """SIGTERM: exit like ``sys.exit(SIGTERM_EXIT_CODE)`` (``finally`` and atexit run)."""
    if os.getpid() != _registry.pid:
        # A forked worker that has not yet restored the default action.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if _registry.exiting:
        return  # already shutting down: let it finish
    raise SystemExit(SIGTERM_EXIT_CODE)


def shutdown(polite_timeout: Optional[float] = None) -> None:
    """Stops every worker of this process still running, all at once, ``polite_timeout``
    seconds before SIGTERM (default ``EXIT_POLITE_TIMEOUT``). The exit hook; safe any time."""
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


class Stopping:
    """One worker that :func:`stop_all` is ending."""

    def __init__(self, worker: Worker, polite: bool) -> None:
        self.worker = worker
        self.env_id = worker.env_id
        self.process = worker.process
        self.conn = worker.conn
        self.polite = polite
        # Answers still to read: every request's, then CLOSE's (a failure is logged).
        self.next_seq = worker.received_seq
        self.close_seq = worker.next_seq if polite else -1
        self.reading = polite
        self.exited = self.process.exitcode is not None

    def read(self) -> None:
        """Reads what the worker sent (without blocking); logs a failed close()."""
        conn = self.conn
        try:
            while self.reading and conn.poll(0):
                msg_type, payload = read_message(conn)
                if self.next_seq == self.close_seq and msg_type is MessageType.EXCEPTION:
                    error = payload.to_exception()
                    if isinstance(error.__cause__, EnvironmentProcessError):
                        error = error.__cause__  # its message has the worker traceback
                    logging.warning("env %s: close() raised in the worker: %s", self.env_id, error)
                self.next_seq += 1
                self.reading = self.next_seq <= self.close_seq
        except (EOFError, OSError):
            self.reading = False

    def on_exit(self) -> None:
        """The worker's sentinel fired: reap it and read its last words."""
        self.process.join(DEATH_GRACE)
        self.exited = self.process.exitcode is not None
        if self.reading:
            self.read()
        if self.polite and self.process.exitcode:
            logging.warning("env %s: the worker died while closing: %s", self.env_id,
                            describe_exit(self.process.exitcode))


def _wait_for_exits(stopping: "List[Stopping]", deadline: float) -> None:
    """Waits until ``stopping`` exited or ``deadline`` passed, reading their pipes meanwhile."""
    poller = select.poll()
    by_fd: Dict[int, Tuple[Stopping, bool]] = {}
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


def stop_all(envs: Sequence[Worker], polite_timeout: Optional[float] = None) -> None:
    """Closes ``envs`` all at once, ``polite_timeout`` (default ``CLOSE_POLITE_TIMEOUT``) s before
    SIGTERM; never raises because of them. A worker that would not read CLOSE is terminated;
    interrupted (Ctrl-C), it kills the workers still running, reaps them and re-raises."""
    if polite_timeout is None:
        polite_timeout = CLOSE_POLITE_TIMEOUT
    deadline = time.monotonic() + polite_timeout
    stopping: List[Stopping] = []
    try:
        for env in envs:
            s = env.begin_close()
            if s is not None:
                stopping.append(s)
        if not stopping:
            return
        for s in stopping:
            if s.exited:  # gone already: the wait skips it
                s.on_exit()
        _wait_for_exits(stopping, deadline)
        late = [s for s in stopping if not s.exited]
        if not late:
            return
        # At exit nobody can act on it.
        log = logging.info if _registry.exiting else logging.warning
        for s in late:
            if s.polite and polite_timeout > 0:
                log("env %s: the worker (pid %s) did not exit within %.1f s; "
                    "terminating it", s.env_id, s.process.pid, polite_timeout)
            s.polite = False  # its death is expected now
            s.process.terminate()
        terminate_wait = (EXIT_TERMINATE_TIMEOUT if _registry.exiting
                          else CLOSE_TERMINATE_TIMEOUT)
        _wait_for_exits(late, time.monotonic() + terminate_wait)
        late = [s for s in late if not s.exited]
        for s in late:
            s.process.kill()
        _wait_for_exits(late, time.monotonic() + KILL_TIMEOUT)
    except BaseException:  # interrupted: end the rest now
        for s in stopping:
            if not s.exited:
                s.polite = False
                s.process.kill()
        _wait_for_exits(stopping, time.monotonic() + KILL_TIMEOUT)
        raise
    finally:
        for s in stopping:
            s.worker.end_close(s)
