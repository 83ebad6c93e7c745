"""Starting and closing many workers at once.

:func:`start_environments` starts ``ProcessEnvironment`` workers one after
another or all together (:func:`wait_start_all` watches all the starting ones
at once, so the first failure is reported at once); :func:`close_all` closes
them all together (:func:`~alf_env.control_plane.shutdown.stop_all`), so n
workers take about as long as the slowest one.
"""

import select
from typing import Dict, Optional, Sequence

from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.protocol import _State
from alf_env.control_plane.shutdown import stop_all


def start_environments(envs: Sequence[ProcessEnvironment], start_serially: bool) -> None:
    """Starts ``envs`` one after another, or all at once and then waits for them.

    When they start at once, all of them are watched together, so a
    constructor that raises or a worker that dies is reported at once, not
    after the envs before it have started. On any failure every env is closed
    before the error propagates, so no worker is left behind.
    """
    try:
        if start_serially:
            for env in envs:
                env.start(wait_to_start=True)
        else:
            for env in envs:
                env.start(wait_to_start=False)
            wait_start_all(envs)
    except BaseException:
        close_all(envs)
        raise


def wait_start_all(envs: Sequence[ProcessEnvironment]) -> None:
    """Waits until every started env has constructed its env, watching all at once.

    Raises at the first failure seen (a constructor that raised, a worker
    that died), without waiting for slower envs; the caller closes them.
    """
    pending = {id(env): env for env in envs if env._state is _State.STARTING}
    while pending:
        poller = select.poll()
        by_fd: Dict[int, ProcessEnvironment] = {}
        for env in pending.values():
            for fd in (env._conn.fileno(), env._process.sentinel):
                poller.register(fd, select.POLLIN)
                by_fd[fd] = env
        for fd, _ in poller.poll():
            env = by_fd[fd]
            if id(env) in pending:
                del pending[id(env)]
                env.wait_start()


def close_all(envs: Sequence[ProcessEnvironment],
              polite_timeout: Optional[float] = None) -> None:
    """Closes ``envs`` all at once (see :func:`stop_all`).

    A worker's exit can take a while (e.g. tearing down torch), so closing n
    workers this way costs about one exit, not n.

    Args:
        envs: the workers (closing never raises because of them).
        polite_timeout: as for :meth:`ProcessEnvironment.close`.
    """
    stop_all(envs, polite_timeout)
