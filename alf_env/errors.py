"""Exceptions raised by alf_env (docs/contract.rst, "Errors")."""

import errno
import multiprocessing
import signal
from typing import Any, List, Optional, Sequence, Tuple


class EnvironmentProcessError(RuntimeError):
    """An error inside an environment worker process.

    Attributes:
        env_id: id of the environment whose worker failed (may be ``None``).
        remote_traceback: the worker-side traceback text, if any.
    """

    def __init__(self, message: str, env_id: Optional[int] = None,
                 remote_traceback: str = "") -> None:
        super().__init__(message)
        self.env_id = env_id
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.args[0], self.env_id, self.remote_traceback))


def describe_exit(exitcode: Optional[int]) -> str:
    """Describes a ``multiprocessing.Process.exitcode`` (negative: a signal) for a human."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by {name} (signal {-exitcode})"
    return f"exited with code {exitcode}"


class WorkerDiedError(EnvironmentProcessError):
    """A worker process ended unexpectedly (crash, signal, ``os._exit``).

    Attributes:
        exitcode: the worker's ``multiprocessing`` exit code (negative for a
            signal), or ``None`` if it could not be collected.
        env_ids: every env the worker held (``[env_id]`` for a worker of one env).
    """

    def __init__(self, env_id: Optional[int], exitcode: Optional[int], during: str = "",
                 env_ids: Optional[Sequence[int]] = None, remote_traceback: str = "") -> None:
        where = f" during {during}" if during else ""
        ids: List[Optional[int]] = [env_id] if env_ids is None else list(env_ids)
        envs = f"env {env_id}" if len(ids) <= 1 else f"envs {ids}"
        # The traceback of a worker that asked to exit: else an env bug looks like a crash.
        last_words = f"\nWorker traceback:\n{remote_traceback}" if remote_traceback else ""
        super().__init__(f"The worker process of {envs} died{where}: "
                         f"{describe_exit(exitcode)}.{last_words}", env_id, remote_traceback)
        self.exitcode = exitcode
        self.during = during
        self.env_ids: Sequence[Optional[int]] = ids

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.env_id, self.exitcode, self.during, self.env_ids,
                             self.remote_traceback))

    @property
    def signal(self) -> Optional[int]:
        """The signal number that killed the worker, or ``None``."""
        return -self.exitcode if self.exitcode is not None and self.exitcode < 0 else None


class EnvironmentClosedError(RuntimeError):
    """An environment was used after ``close()``."""


class EnvironmentClosedAttributeError(EnvironmentClosedError, AttributeError):
    """An attribute of a closed environment's remote env was read; an ``AttributeError``, so
    that ``getattr(env, name, default)`` and ``hasattr`` work."""


class ConcurrentUseError(RuntimeError):
    """A second thread called an environment while another thread was using it: refused
    before anything reaches the workers, instead of deadlocking or mixing up answers."""


class FdLimitError(OSError):
    """Starting the workers would pass this process's limit on open files (``EMFILE``).

    Attributes:
        needed: descriptors this process would have open with the workers.
        limit: the soft ``RLIMIT_NOFILE``.
    """

    def __init__(self, message: str, needed: int, limit: int) -> None:
        super().__init__(errno.EMFILE, message)
        self.needed, self.limit = needed, limit

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.strerror, self.needed, self.limit))


class EnvTimeoutError(TimeoutError, multiprocessing.TimeoutError):
    """A wait passed its timeout (also ``multiprocessing.TimeoutError``, for gymnasium users)."""
