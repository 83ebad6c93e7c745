"""What crosses the pipe for a worker-side exception or a remote method.

:class:`RemoteException` carries an exception raised in a worker home whole
(type, message, worker traceback, env id), even when the exception itself
cannot be pickled; :class:`RemoteMethod` is the answer to ``ACCESS`` of a
method, which the parent then calls remotely.
"""

import pickle
import traceback
from typing import Optional

from alf_env.errors import EnvironmentProcessError

#: Set on an exception by a worker that hosts several envs: the env that raised it.
RAISED_BY_ATTR = "alf_env_raised_by"


def mark_raised_by(exc: BaseException, env_id: int) -> None:
    """Says which env of its worker raised ``exc`` (the id :class:`RemoteException` reports)."""
    try:
        setattr(exc, RAISED_BY_ATTR, env_id)
    except AttributeError:  # an exception type with __slots__: the worker's id stays
        pass


class RemoteException:
    """An exception raised in a worker, in a form that always crosses the pipe.

    Attributes:
        exception: the original exception if it survives a pickle round trip,
            else ``None``.
        type_name: qualified name of the exception type.
        message: ``str()`` of the exception.
        traceback_text: the worker-side traceback.
        env_id: the env that raised (as marked by :func:`mark_raised_by`), else
            the env whose worker raised.
        during: what the worker was doing (e.g. ``"step"``).
        fatal: the worker's last words: it exits right after sending them
            (e.g. the env called ``sys.exit()``); the trainer raises
            ``WorkerDiedError`` with this traceback.
    """

    def __init__(self, exc: BaseException, env_id: Optional[int],
                 during: str, fatal: bool = False) -> None:
        self.type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        self.message = str(exc)
        self.traceback_text = "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.env_id = getattr(exc, RAISED_BY_ATTR, env_id)
        self.during = during
        self.fatal = fatal
        # Never re-raised whole in the trainer: a SystemExit would end it and
        # a KeyboardInterrupt look like Ctrl-C. Kept only if it survives a pickle round trip.
        self.exception: Optional[BaseException] = None
        if isinstance(exc, Exception):
            try:
                restored = pickle.loads(pickle.dumps(exc))
            except Exception:  # noqa: BLE001 -- any failure means "not picklable"
                restored = None
            self.exception = exc if type(restored) is type(exc) else None

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
        # The mark named the env within its worker; here env_id is the id to
        # report, and a process that reports this exception again (a Ray actor
        # hosting a share of the envs) must not read the worker's local id.
        if hasattr(exc, RAISED_BY_ATTR):
            delattr(exc, RAISED_BY_ATTR)
        exc.__cause__ = remote
        if hasattr(exc, "add_note"):
            exc.add_note(f"({header}; worker traceback in __cause__)")
        return exc


class RemoteMethod:
    """The answer to ``ACCESS`` of a method: the parent calls it remotely."""

    def __init__(self, name: str) -> None:
        self.name = name

