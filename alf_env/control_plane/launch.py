"""Starting and closing many workers at once; the file descriptors they need are checked up
front (running out midway hides the cause) with one :class:`~alf_env.errors.FdLimitError`."""

import errno
import os
import resource
import select
from typing import Optional, Sequence

from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.protocol import EnvState
from alf_env.control_plane.shutdown import stop_all
from alf_env.errors import FdLimitError

# Kept per worker: the pipe, Popen's sentinel and parent watch (a job loop adds a pidfd).
FDS_PER_WORKER = 3
FDS_PER_FAST_WORKER = 4
# Open only while the workers start (Popen's pipes, the region sent), and the region.
FDS_TO_SPARE = 8


def start_environments(envs: Sequence[ProcessEnvironment], start_serially: bool) -> None:
    """Starts ``envs`` one after another, or all at once and then waits for them; a failure
    (``FdLimitError``: not enough file descriptors) closes every env first."""
    check_fd_limit(envs)
    try:
        for env in envs:
            env.start(wait_to_start=start_serially)
        if not start_serially:
            wait_start_all(envs)
    except BaseException as exc:
        close_all(envs)
        if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
            raise _fd_limit_error(envs, ran_out=True) or exc from None
        raise


def check_fd_limit(envs: Sequence[ProcessEnvironment]) -> None:
    """Raises :class:`FdLimitError` if ``envs``' workers would pass ``RLIMIT_NOFILE``."""
    error = _fd_limit_error(envs, ran_out=False)
    if error is not None:
        raise error


def _fd_limit_error(envs: Sequence[ProcessEnvironment], ran_out: bool) -> Optional[FdLimitError]:
    """The error of :func:`check_fd_limit` (or, ``ran_out``, of ``EMFILE``), or ``None``."""
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
    """Waits for every starting env, watching all at once; raises at the first failure."""
    pending = {id(env): env for env in envs if env.channel.state is EnvState.STARTING}
    while pending:
        poller = select.poll()
        by_fd = {fd: env for env in pending.values() for fd in env.channel.fds()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll():
            if id(by_fd[fd]) in pending:
                pending.pop(id(by_fd[fd])).wait_start()


def close_all(envs: Sequence[ProcessEnvironment], polite_timeout: Optional[float] = None) -> None:
    """Closes ``envs`` all at once (:func:`stop_all`; ``polite_timeout`` as for
    :meth:`ProcessEnvironment.close`): n workers cost about one exit."""
    stop_all([env.channel for env in envs], polite_timeout)
