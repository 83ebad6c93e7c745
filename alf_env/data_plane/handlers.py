"""The interface between the job loop and a front end's row handler: what a STEP or RESET
does to a worker's env and rows is the handler's, so the loop knows no front end."""

from multiprocessing.connection import Connection
from typing import Any, Callable, Optional, Protocol

from alf_env.control_plane.step_timings import StepClock
from alf_env.data_plane.shared_block import SharedBlock

__all__ = ["JobHandler", "HandlerFactory"]


class JobHandler(Protocol):
    """Runs STEP and RESET jobs for one worker (raising reports ERROR). ``after_step``, if any,
    runs once a STEP is reported, overlapping the trainer; it raises nothing."""

    after_step: Optional[Callable[[], None]]

    def step(self, arg: int) -> None:
        """Reads the action rows, steps, writes the result rows."""

    def reset(self, arg: int) -> None:
        """Resets (``arg`` is handler-defined), writes the rows."""


class HandlerFactory(Protocol):
    """Builds a worker's :class:`JobHandler`; made in the parent, called in the worker
    (pickled: a module-level function or an instance of a module-level class)."""

    def __call__(self, env: Any, block: SharedBlock, conn: Connection, env_id: Optional[int],
                 clock: StepClock, /) -> JobHandler:
        """The handler of ``env`` over ``block``, timing each env's step into ``clock``."""
