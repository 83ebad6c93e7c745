"""What crosses the pipe for a worker's exception (:class:`RemoteException`) or method
(:class:`RemoteMethod`); see docs/protocol.rst, "How errors travel"."""

import pickle
import traceback
from typing import Optional

from alf_env.errors import EnvironmentProcessError

#: Set on an exception by a worker that hosts several envs: the env that raised it.
RAISED_BY_ATTR = "alf_env_raised_by"


def mark_raised_by(exc: BaseException, env_id: int) -> None:
    """Says which env of its worker raised ``exc``."""
    try:
        setattr(exc, RAISED_BY_ATTR, env_id)
    except AttributeError:  # an exception type with __slots__: the worker's id stays
        pass


class RemoteException:
    """An exception raised in a worker, in a form that always crosses the pipe (``exception``
    only if it pickles). ``fatal``: the worker's last words, after which it exits."""

    def __init__(self, exc: BaseException, env_id: Optional[int],
                 during: str, fatal: bool = False) -> None:
        self.type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        self.message = str(exc)
        self.traceback_text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.env_id = getattr(exc, RAISED_BY_ATTR, env_id)
        self.during = during
        self.fatal = fatal
        # Not a SystemExit (it would end the trainer) nor a KeyboardInterrupt.
        self.exception: Optional[BaseException] = None
        if isinstance(exc, Exception):
            try:
                restored = pickle.loads(pickle.dumps(exc))
            except Exception:  # noqa: BLE001 -- any failure means "not picklable"
                restored = None
            self.exception = exc if type(restored) is type(exc) else None

    def to_exception(self) -> BaseException:
        """The exception to raise in the parent (docs/protocol.rst, "How errors travel")."""
        header = (f"{self.type_name} raised in the worker of env {self.env_id} "
                  f"during {self.during}")
        remote = EnvironmentProcessError(f"{header}: {self.message}\nWorker traceback:\n"
                                         f"{self.traceback_text}", self.env_id, self.traceback_text)
        if self.exception is None:
            return remote
        exc = self.exception
        # Reported again (by a Ray actor), it must not carry the worker's local env id.
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

