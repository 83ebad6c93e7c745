"""How a worker's life is tied to its parent's: the parent-death watchdog and signals
(docs/reliability.md, "How a training script ends")."""

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
_DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_PR_SET_PDEATHSIG = 1  # prctl(2)

# parent_death_plan() under forkserver: the parent's pid is not known here.
UNKNOWN_PARENT = 0


def parent_death_plan(start_method: str) -> Optional[int]:
    """The argument of :func:`die_with_parent` for a worker this thread starts (``None``:
    no signal). The kernel sends it when the *thread* that forked the worker ends, so
    only the main thread's workers and the fork server's get it."""
    if start_method == "forkserver":
        return UNKNOWN_PARENT
    if threading.current_thread() is threading.main_thread():
        return os.getpid()
    return None


def die_with_parent(parent: Optional[int]) -> None:
    """Asks the kernel to SIGKILL this worker when its parent dies (Linux): a stopped
    worker cannot run its watchdog thread. A parent already gone exits it at once."""
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
    """Closes this worker's copy of the fork server's "alive" pipe: with it, a stopped worker
    kept the server (its parent) alive past the trainer, so its death signal never came."""
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
    """Starts a thread that ends this process when ``parent_pid`` (the trainer) dies."""
    threading.Thread(target=_watch_parent, args=(parent_pid,),
                     name="alf_env-parent-watchdog", daemon=True).start()


def worker_signals() -> None:
    """Sets up a worker's signals: SIGINT ignored, SIGTERM's default action (not the
    trainer's handler, inherited under ``fork``) set before they are unblocked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _DEFERRED_SIGNALS)


class signals_deferred:
    """Records SIGINT and SIGTERM around ``process.start()`` (main thread only), for the
    program's handlers afterwards: a Ctrl-C must neither cut ``start()`` half way nor be
    lost. SIGINT (and SIGTERM under ``fork``) is also blocked, so the worker is born with
    it blocked; the resource tracker, which unblocks both, is started first."""

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
