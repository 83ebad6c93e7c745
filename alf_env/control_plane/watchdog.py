"""How a worker's life is tied to its parent's: the parent-death watchdog and signals.

A worker whose parent dies exits by itself (a watchdog thread polls a pidfd of
the parent). Workers ignore SIGINT, so Ctrl-C in the foreground raises one
``KeyboardInterrupt`` in the parent instead of a traceback per worker, and
restore the default SIGTERM action (they end at once when terminated). While
a worker starts, the parent holds SIGINT and SIGTERM back
(:class:`_signals_deferred`), so a signal neither interrupts ``start()`` half
way nor is lost.
"""

import multiprocessing.resource_tracker
import os
import select
import signal
import threading
import time
from typing import Any, List


# How often a worker without pidfd support checks whether its parent is alive.
_PARENT_POLL_INTERVAL = 0.2

# Held back while a worker process starts (see _signals_deferred).
_DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM}


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
