"""Guards of the handles of worker processes against the uses they cannot survive.

An environment that owns worker processes and pipes (``ProcessEnvironment`` and
every front end built on it) is used by one thread at a time and cannot be
copied: two threads stepping one env deadlocked or read each other's answers,
and a failed ``copy.deepcopy`` left a half-made copy whose pipe objects closed
the original's descriptors when collected. :class:`OneThread` and
:class:`NotCopyable` refuse both up front, before anything reaches a worker.
"""

import functools
import threading
from typing import Any, Callable, NoReturn, Sequence, TypeVar, cast

from alf_env.errors import ConcurrentUseError


class OneThread:
    """Refuses a second thread while one thread uses an object: it raises
    :class:`~alf_env.errors.ConcurrentUseError`, and never waits, so misuse
    cannot deadlock.

    The thread inside may enter again (e.g. a request whose doorbell reads a
    report of the same worker); every :meth:`enter` is paired with a
    :meth:`leave`. A reentrant lock taken without waiting: a few hundred
    nanoseconds per call.

    Args:
        owner: what is guarded, for the error message (e.g. ``"ProcessEnvironment
            of env 3"``).
    """

    __slots__ = ("_lock", "_owner", "leave")

    def __init__(self, owner: str) -> None:
        self._lock = threading.RLock()
        self._owner = owner
        self.leave: Callable[[], None] = self._lock.release  # after each enter()

    def enter(self, what: str) -> None:
        """Enters (again, for the thread inside).

        Raises:
            ConcurrentUseError: another thread is inside.
        """
        if not self._lock.acquire(False):
            raise ConcurrentUseError(
                f"{self._owner}: {what} from a second thread while another thread is "
                f"using this environment; it is not thread-safe. Use it from one thread "
                f"only (or guard it with a lock). Nothing was sent to its workers")

    def run(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` between :meth:`enter` and :meth:`leave`."""
        self.enter(what)
        try:
            return fn()
        finally:
            self.leave()


class NotCopyable:
    """Makes ``copy.copy``, ``copy.deepcopy`` and ``pickle`` of an env raise
    ``TypeError`` before anything is copied (a shallow copy would share the
    original's workers and pipes), so the original keeps working."""

    __slots__ = ()

    def _refuse_copy(self, how: str) -> NoReturn:
        name = type(self).__name__
        raise TypeError(
            f"{how} of a {name} is not possible: its worker processes and pipes cannot "
            f"be copied or pickled. Make a new {name} from the same env constructors "
            f"instead (the original is unchanged)")

    def __copy__(self) -> NoReturn:
        self._refuse_copy("copy.copy()")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self._refuse_copy("copy.deepcopy()")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        self._refuse_copy("pickling")


_Method = TypeVar("_Method", bound=Callable[..., Any])


def one_thread_at_a_time(method: _Method, what: str) -> _Method:
    """``method`` (of a class whose instances have a :class:`OneThread` in
    ``_one_thread``), refusing a second thread while another is inside.

    Args:
        method: the function to guard.
        what: the call, for the error message (e.g. ``"a request"``).
    """

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard = self._one_thread
        guard.enter(what)
        try:
            return method(self, *args, **kwargs)
        finally:
            guard.leave()

    return cast(_Method, guarded)


def guard_methods(cls: type, names: Sequence[str]) -> None:
    """Replaces the methods ``names`` of ``cls`` by :func:`one_thread_at_a_time` of them."""
    for name in names:
        setattr(cls, name, one_thread_at_a_time(getattr(cls, name), f"{name}()"))
