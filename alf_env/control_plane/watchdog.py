"""How a worker's life is tied to its parent's: the parent-death watchdog and signals.

A worker whose parent dies exits by itself: a watchdog thread polls a pidfd of
the parent, and the kernel sends the worker SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``, :func:`die_with_parent`), which also ends a worker that
cannot run its watchdog (stopped by SIGSTOP, or stuck holding the GIL).
Workers ignore SIGINT, so Ctrl-C in the foreground raises one
``KeyboardInterrupt`` in the parent instead of a traceback per worker, and
restore the default SIGTERM action (they end at once when terminated). While
a worker starts, the parent holds SIGINT and SIGTERM back
(:class:`signals_deferred`), so a signal neither interrupts ``start()`` half
way nor is lost.
"""

import ctypes
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import select
import signal
import threading
import time
from types import FrameType
from typing import Any, List, Optional

_PARENT_POLL_INTERVAL = 0.2  # seconds, for a worker without pidfd support
_DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # see signals_deferred
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies

# parent_death_plan() for a worker forked by the fork server: its parent's pid
# is not known here (only that the fork server ends with the trainer).
UNKNOWN_PARENT = 0


def parent_death_plan(start_method: str) -> Optional[int]:
    """How a worker about to be started by this thread ties its life to its
    parent's (the argument of :func:`die_with_parent`, in the trainer).

    The kernel sends the parent-death signal when the *thread* that forked
    the worker ends, not the process: a worker forked (``fork``, ``spawn``)
    by a thread that ends earlier than the trainer would be killed with it.
    So only workers started from the main thread, which lasts as long as the
    process, and those of the fork server, forked by its only thread (it
    ends with the trainer), get it; the watchdog thread covers the others.

    Returns:
        the pid the worker's parent must have, :data:`UNKNOWN_PARENT` (fork
        server), or ``None`` (no parent-death signal).
    """
    if start_method == "forkserver":
        return UNKNOWN_PARENT
    if threading.current_thread() is threading.main_thread():
        return os.getpid()
    return None


def die_with_parent(parent: Optional[int]) -> None:
    """Asks the kernel to SIGKILL this worker when its parent dies (Linux).

    Set first thing in the worker, with ``parent`` from :func:`parent_death_plan`:
    a stopped worker (SIGSTOP) cannot run its watchdog thread. A parent that
    died before the request took effect is no longer ``getppid()``: the worker
    exits at once.
    """
    if parent is None:
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return  # not Linux: the watchdog thread alone
    zero = ctypes.c_ulong(0)
    if prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), zero, zero, zero) != 0:
        return
    if parent == UNKNOWN_PARENT:
        _let_the_fork_server_end()
    elif os.getppid() != parent:
        os._exit(0)


def _let_the_fork_server_end() -> None:
    """Closes this worker's copy of the fork server's "alive" pipe.

    multiprocessing gives every process the fork server starts a copy of the
    pipe whose end-of-file tells the server to exit, so the server (this
    worker's parent) lived as long as any of its children: a stopped worker
    kept it alive, and it kept the worker from its parent-death signal. The
    trainer holds the pipe too, so the server still serves it while it
    runs; without the workers' copies it ends with the trainer, and the
    kernel then ends every worker. (A process this worker starts with
    ``forkserver`` gets a fork server of its own: the copy is not used.)
    """
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if server is None or fd is None:
        return
    server._forkserver_alive_fd = None
    try:
        os.close(fd)
    except OSError:
        pass


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
    """Starts a daemon thread that ends this process when ``parent_pid`` dies
    (the trainer's, passed explicitly: under ``forkserver`` the OS parent is
    the fork server)."""
    threading.Thread(target=_watch_parent, args=(parent_pid,),
                     name="alf_env-parent-watchdog", daemon=True).start()


def worker_signals() -> None:
    """Sets up a worker's signals: SIGINT ignored, SIGTERM ends it at once.

    The default SIGTERM action replaces the trainer's handler (inherited under
    ``fork``) before the signals :class:`signals_deferred` blocked are
    unblocked, so terminating a worker that just started ends it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _DEFERRED_SIGNALS)


class signals_deferred:
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

    def _record(self, signum: int, frame: Optional[FrameType]) -> None:
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

    def __exit__(self, *exc_info: Any) -> None:
        if not self._active:
            return
        for sig, handler in self._previous.items():
            # None: a handler set outside Python, which cannot be restored.
            if handler is None:
                handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        for signum in dict.fromkeys(self._received):
            handler = signal.getsignal(signum)
            if callable(handler):
                handler(signum, None)  # e.g. raises KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)
