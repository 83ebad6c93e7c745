"""The interface between the job loop and a front end's row handler.

The job loop (:mod:`alf_env.data_plane.job_loop`) moves jobs, not data of any
particular kind: what a STEP or RESET job does to a worker's env and rows is
up to a *job handler*, which a front end provides (gymnasium envs, ALF time
steps). The loop is typed against the two protocols here and knows no front
end.

A front end hands the parent a :class:`HandlerFactory` (inside the
``FastLoopSpec`` it sends with ``FAST_LOOP``); the worker calls it once, with
its env, the shared block, its pipe and its env id, and gets the
:class:`JobHandler` it runs jobs with.
"""

import multiprocessing.connection
from typing import Any, Callable, Optional, Protocol

from alf_env.data_plane.shared_block import SharedBlock

__all__ = ["JobHandler", "HandlerFactory"]


class JobHandler(Protocol):
    """Runs STEP and RESET jobs for one worker; built in the worker by a factory.

    Raising from :meth:`step` or :meth:`reset` reports ERROR for the job and
    sends the exception home on the pipe.

    Attributes:
        after_step: run once a STEP job has been reported finished (work
            that may overlap the trainer's, e.g. resetting envs that ended),
            or ``None``. It raises nothing: errors are kept for the next job.
    """

    after_step: Optional[Callable[[], None]]

    def step(self, arg: int) -> None:
        """Reads the action rows, steps, writes the result rows."""

    def reset(self, arg: int) -> None:
        """Resets (``arg`` is handler-defined, e.g. which staged reset), writes the rows."""


class HandlerFactory(Protocol):
    """Builds a worker's :class:`JobHandler`; made in the parent, called in the worker.

    It travels to the worker pickled, so it must be picklable under spawn and
    forkserver (an instance of a module-level class, or a module-level
    function).
    """

    def __call__(self, env: Any, block: SharedBlock,
                 conn: multiprocessing.connection.Connection,
                 env_id: Optional[int], /) -> JobHandler:
        """The handler of the worker's ``env`` over ``block`` (``conn``: its pipe)."""
