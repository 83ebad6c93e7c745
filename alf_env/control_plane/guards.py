"""Refusing a second thread (two deadlocked or read each other's answers) and copies (a half-made
``copy.deepcopy`` closed the original's pipes) of an env that owns worker processes."""

import functools
import threading
from typing import Any, Callable, NoReturn, Sequence, TypeVar, cast

from alf_env.errors import ConcurrentUseError


class OneThread:
    """Refuses (``ConcurrentUseError``, never waiting: no deadlock) a second thread while one
    uses ``owner``; the one inside may enter again (each :meth:`enter` with a :meth:`leave`)."""

    __slots__ = ("_lock", "_owner", "leave")

    def __init__(self, owner: str) -> None:
        self._lock = threading.RLock()
        self._owner = owner
        self.leave: Callable[[], None] = self._lock.release  # after each enter()

    def enter(self, what: str) -> None:
        """Enters (again, for the thread inside); ``ConcurrentUseError`` if another is inside."""
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
    """Makes ``copy.copy``, ``copy.deepcopy`` and ``pickle`` of an env raise ``TypeError``
    before anything is copied (a shallow copy would share the original's workers)."""

    __slots__ = ()

    def _refuse_copy(self, how: str) -> NoReturn:
        name = type(self).__name__
        raise TypeError(f"{how} of a {name} is not possible: its worker processes and pipes "
                        f"cannot be copied or pickled. Make a new {name} from the same env "
                        f"constructors instead (the original is unchanged)")

    def __copy__(self) -> NoReturn:
        self._refuse_copy("copy.copy()")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self._refuse_copy("copy.deepcopy()")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        self._refuse_copy("pickling")


_Method = TypeVar("_Method", bound=Callable[..., Any])


def one_thread_at_a_time(method: _Method, what: str) -> _Method:
    """``method`` guarded by its instance's ``_one_thread``; ``what`` names the call."""

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
