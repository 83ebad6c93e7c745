"""Exceptions raised by alf_env.

Worker failures travel home whole: the error names the env id, carries the
worker's traceback text, and keeps the original exception type when it can be
pickled (see :class:`alf_env.control_plane.remote.RemoteException`).
"""

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
    """Describes a ``multiprocessing.Process.exitcode`` for a human.

    Args:
        exitcode: ``None`` (still running or unknown), ``>= 0`` (exit status)
            or ``< 0`` (killed by signal ``-exitcode``).
    """
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

    def __init__(self, env_id: Optional[int], exitcode: Optional[int],
                 during: str = "", env_ids: Optional[Sequence[int]] = None,
                 remote_traceback: str = "") -> None:
        where = f" during {during}" if during else ""
        ids: List[Optional[int]] = [env_id] if env_ids is None else list(env_ids)
        envs = f"env {env_id}" if len(ids) <= 1 else f"envs {ids}"
        # A worker that asked to exit (sys.exit(), KeyboardInterrupt in its env)
        # says where first: without it an env bug looks like a crash.
        last_words = f"\nWorker traceback:\n{remote_traceback}" if remote_traceback else ""
        super().__init__(
            f"The worker process of {envs} died{where}: "
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
        if self.exitcode is not None and self.exitcode < 0:
            return -self.exitcode
        return None


class EnvironmentClosedError(RuntimeError):
    """An environment was used after ``close()``."""


class EnvironmentClosedAttributeError(EnvironmentClosedError, AttributeError):
    """An attribute of a closed environment's remote env was read.

    Also an ``AttributeError``, so that ``getattr(env, name, default)`` gives
    the default and ``hasattr`` is ``False``, as for any object without the
    attribute (other uses of a closed env raise :class:`EnvironmentClosedError`).
    """


class ConcurrentUseError(RuntimeError):
    """A second thread called an environment while another thread was using it.

    The front ends are not thread-safe: the call is refused before anything
    reaches the workers, instead of deadlocking, mixing up the two threads'
    answers or actions, or stepping the envs for the refused call. A
    ``RuntimeError``, like the native engine's own refusal (a ``Controller``
    used by two threads at once), which stays as a backstop.
    """


class FdLimitError(OSError):
    """Starting the workers would pass this process's limit on open files (RLIMIT_NOFILE).

    An ``OSError`` with ``errno`` ``EMFILE``, like the error it replaces, whose
    message says how many file descriptors the workers need and the limit.

    Attributes:
        needed: descriptors this process would have open with the workers.
        limit: the soft ``RLIMIT_NOFILE``.
    """

    def __init__(self, message: str, needed: int, limit: int) -> None:
        super().__init__(errno.EMFILE, message)
        self.needed = needed
        self.limit = limit

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.strerror, self.needed, self.limit))


class EnvTimeoutError(TimeoutError, multiprocessing.TimeoutError):
    """A wait passed its timeout.

    It is both the built-in ``TimeoutError`` and ``multiprocessing.TimeoutError``
    (what gymnasium's ``AsyncVectorEnv`` users catch).
    """
