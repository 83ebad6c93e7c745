"""SIGALRM in tests: an exception raised wherever the trainer happens to be, as
Ctrl-C raises ``KeyboardInterrupt``."""

import contextlib
import signal
from typing import Any, Callable, Iterator, Type, Union


@contextlib.contextmanager
def alarm(action: Union[Type[BaseException], Callable[[int, Any], None]], first: float,
          interval: float = 0.0) -> Iterator[None]:
    """Within the block, SIGALRM fires after ``first`` s (then every
    ``interval`` s, if set) and raises ``action`` (an exception type) or calls
    it (a signal handler); the timer and the previous handler are back after.
    """
    if isinstance(action, type) and issubclass(action, BaseException):
        exc_type = action

        def handler(signum: int, frame: Any) -> None:
            raise exc_type()
    else:
        handler = action
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, first, interval)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
