"""Plain objects served by workers in the control-plane tests.

They are deliberately not AlfEnvironments: ProcessEnvironment serves any object.
Faults are injected on request so each test names exactly what goes wrong.
"""

import ctypes
import os
import signal
import threading
import time
from typing import Optional


class UnpicklableError(Exception):
    """An exception that cannot cross a pipe (it holds a lock)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def inject(fault: str) -> None:
    """Makes the current process fail in the way ``fault`` names."""
    if fault == "raise":
        raise ValueError("injected failure")
    if fault == "raise_unpicklable":
        raise UnpicklableError("injected unpicklable failure")
    if fault == "exit":
        os._exit(3)
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "segv":
        ctypes.string_at(0)
    if fault == "hang":
        while True:
            time.sleep(1.0)
    raise AssertionError(f"unknown fault {fault!r}")


def _only_in(pid: int) -> "OnlyHere":
    if os.getpid() != pid:
        raise AttributeError(f"OnlyHere: made in process {pid}, unpickled in {os.getpid()}")
    return OnlyHere()


class OnlyHere:
    """Pickles anywhere, unpickles only in the process that made it (as a class
    that only the worker can import); ``made_in`` pretends another maker."""

    def __init__(self, made_in: Optional[int] = None) -> None:
        self.made_in = os.getpid() if made_in is None else made_in

    def __reduce__(self):
        return _only_in, (self.made_in,)


class ProbeEnv:
    """Answers calls; fails as told in ``fault_phase`` ("ctor", "call", "close")."""

    def __init__(self, env_id: Optional[int] = None, fault: str = "",
                 fault_phase: str = "") -> None:
        self.env_id = env_id
        self.fault = fault
        self.fault_phase = fault_phase
        self.spec_calls = 0
        self.closed = False
        if fault_phase == "ctor":
            inject(fault)

    def add(self, a, b):
        return a + b

    def whoami(self):
        return self.env_id, os.getpid()

    def observation_spec(self):
        self.spec_calls += 1
        return ("obs-spec", self.env_id)

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def fail(self):
        inject(self.fault)

    def collect_garbage(self) -> int:
        """Runs a full collection in the worker; returns what it found."""
        import gc
        return gc.collect()

    def raise_value_error(self, message: str):
        raise ValueError(message)

    def unpicklable_result(self):
        return threading.Lock()

    def result_only_this_process_unpickles(self):
        return OnlyHere()

    def close(self):
        self.closed = True
        if self.fault_phase == "close":
            inject(self.fault)


class NoEnvIdProbe:
    """A constructor without an ``env_id`` parameter."""

    def __init__(self) -> None:
        self.created = True
