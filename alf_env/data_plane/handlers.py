"""The interface between the job loop and a front end's row handler.

The job loop moves jobs, not data of any kind: what a STEP or RESET does to a
worker's env and rows is up to the *job handler* a front end provides, so the
loop is typed against these two protocols and knows no front end.
"""

import multiprocessing.connection
from typing import Any, Callable, Optional, Protocol

from alf_env.control_plane.step_timings import StepClock
from alf_env.data_plane.shared_block import SharedBlock

__all__ = ["JobHandler", "HandlerFactory"]


class JobHandler(Protocol):
    """Runs STEP and RESET jobs for one worker; raising reports ERROR for the job.

    Attributes:
        after_step: run once a STEP job is reported finished (work that may
            overlap the trainer's), or ``None``. Raises nothing: errors are kept
            for the next job.
    """

    after_step: Optional[Callable[[], None]]

    def step(self, arg: int) -> None:
        """Reads the action rows, steps, writes the result rows."""

    def reset(self, arg: int) -> None:
        """Resets (``arg`` is handler-defined), writes the rows."""


class HandlerFactory(Protocol):
    """Builds a worker's :class:`JobHandler`; made in the parent, called in the worker.

    Pickled to the worker, so under spawn and forkserver it must be a module-level
    function or an instance of a module-level class.
    """

    def __call__(self, env: Any, block: SharedBlock,
                 conn: multiprocessing.connection.Connection,
                 env_id: Optional[int], clock: StepClock, /) -> JobHandler:
        """The handler of the worker's ``env`` over ``block`` (``conn``: its pipe),
        timing each env's step into ``clock`` (the worker's, which ``timings()``
        reads: control_plane/step_timings.py)."""
