"""Starting and closing many workers at once.

:func:`start_environments` starts ``ProcessEnvironment`` workers one after
another or all together (:func:`wait_start_all` watches all the starting ones
at once, so the first failure is reported at once); :func:`close_all` closes
them all together (:func:`~alf_env.control_plane.shutdown.stop_all`), so n
workers take about as long as the slowest one.

Before starting them, :func:`check_fd_limit` checks that the file
descriptors they need fit under ``RLIMIT_NOFILE``: running out midway fails
in ways that hide the cause (an empty ``EOFError``, a request that "did not
unpickle in the worker", a traceback of a ``multiprocessing`` thread), so it
is refused up front, as is any ``EMFILE`` while they start, with one
:class:`~alf_env.errors.FdLimitError` that says what is needed.
"""

import errno
import os
import resource
import select
from typing import Optional, Sequence

from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.protocol import EnvState
from alf_env.control_plane.shutdown import stop_all
from alf_env.errors import FdLimitError

# Descriptors the trainer keeps per worker: its end of the pipe and the two
# pipes of multiprocessing's Popen (the sentinel and the child's watch of
# its parent); a worker in a job loop adds a pidfd.
FDS_PER_WORKER = 3
FDS_PER_FAST_WORKER = 4
# Descriptors open only while the workers start (a Popen's pipes, sending the
# shared region to a worker), and the shared region itself.
FDS_TO_SPARE = 8


def start_environments(envs: Sequence[ProcessEnvironment], start_serially: bool) -> None:
    """Starts ``envs`` one after another, or all at once and then waits for them
    (:func:`wait_start_all`). On any failure every env is closed before the
    error propagates, so no worker is left behind.

    Raises:
        FdLimitError: the workers need more file descriptors than
            ``RLIMIT_NOFILE`` allows (nothing is started), or ran out of them
            while starting.
    """
    check_fd_limit(envs)
    try:
        if start_serially:
            for env in envs:
                env.start(wait_to_start=True)
        else:
            for env in envs:
                env.start(wait_to_start=False)
            wait_start_all(envs)
    except BaseException as exc:
        close_all(envs)
        if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
            raise _fd_limit_error(envs, ran_out=True) or exc from None
        raise


def check_fd_limit(envs: Sequence[ProcessEnvironment]) -> None:
    """Raises :class:`FdLimitError` if ``envs``' workers would pass ``RLIMIT_NOFILE``.

    Counts the descriptors open now (``/proc/self/fd``; no check without it),
    those each worker keeps (:data:`FDS_PER_WORKER`, or
    :data:`FDS_PER_FAST_WORKER` in a job loop) and :data:`FDS_TO_SPARE`.
    """
    error = _fd_limit_error(envs, ran_out=False)
    if error is not None:
        raise error


def _fd_limit_error(envs: Sequence[ProcessEnvironment], ran_out: bool
                    ) -> Optional[FdLimitError]:
    """The error of :func:`check_fd_limit`, or of ``envs`` that ``ran_out`` of
    descriptors while starting; ``None`` if there is none."""
    try:
        open_now = len(os.listdir("/proc/self/fd")) - 1  # less listdir's own
    except OSError:
        if not ran_out:
            return None
        open_now = 0
    fast = sum(1 for env in envs if env.channel.fast)
    needed = (open_now + FDS_PER_WORKER * (len(envs) - fast) + FDS_PER_FAST_WORKER * fast
              + FDS_TO_SPARE)
    limit, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if ran_out:
        detail = "ran out of them while starting"
    elif limit == resource.RLIM_INFINITY or needed <= limit:
        return None
    else:
        each = FDS_PER_FAST_WORKER if fast else FDS_PER_WORKER
        detail = f"{open_now} open now + {each} per worker + {FDS_TO_SPARE} while they start"
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    return FdLimitError(
        f"{len(envs)} worker processes need about {needed} open file descriptors "
        f"in this process ({detail}), but its limit on open files (RLIMIT_NOFILE) "
        f"is {limit}: raise it (e.g. `ulimit -n {max(needed * 2, 1024)}` in the "
        f"shell, or resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard)) with n up "
        f"to the hard limit, {hard_text}) or use fewer workers (num_workers)", needed, limit)


def wait_start_all(envs: Sequence[ProcessEnvironment]) -> None:
    """Waits until every started env has constructed its env, watching all at once.

    Raises at the first failure seen (a constructor that raised, a worker
    that died), without waiting for slower envs; the caller closes them.
    """
    pending = {id(env): env for env in envs if env.channel.state is EnvState.STARTING}
    while pending:
        poller = select.poll()
        by_fd = {fd: env for env in pending.values() for fd in env.channel.fds()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll():
            if id(by_fd[fd]) in pending:
                pending.pop(id(by_fd[fd])).wait_start()


def close_all(envs: Sequence[ProcessEnvironment],
              polite_timeout: Optional[float] = None) -> None:
    """Closes ``envs`` all at once (see :func:`stop_all`): a worker's exit can take
    a while (e.g. tearing down torch), and n workers cost about one exit, not n.

    Args:
        envs: the workers (closing never raises because of them).
        polite_timeout: as for :meth:`ProcessEnvironment.close`.
    """
    stop_all([env.channel for env in envs], polite_timeout)
