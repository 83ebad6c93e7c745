"""The worker side of the native fast path: the job loop.

A worker enters this loop when its parent sends ``MessageType.FAST_LOOP``.
From then on it waits on its job slot in the shared region (a futex wait that
releases the GIL) and runs one job at a time:

- ``STEP``: the job handler reads this worker's action rows, steps its env(s)
  and writes the results into this worker's rows; report OK.
- ``RESET``: the handler resets (the job argument is handler-defined, e.g. a
  seed) and writes the results; report OK.
- ``CALL``: one request is coming on the pipe (the parent posts the job
  first, then writes the request while this worker reads it, so a request
  of any size goes through); read it, report OK, then serve it (the answer
  goes back on the pipe, where the parent waits for it).
- ``CLOSE``: report OK and go back to serving the pipe directly.

A step or reset that raises reports ERROR and then sends the exception,
whole, on the pipe (the parent reads it as an unsolicited report). Nothing is
sent on the pipe while the parent waits for the job to finish without reading
the pipe, so no message, however large, can block both sides. Fixed-size
data moves only through the shared rows; anything of variable size moves on
the pipe.
"""

from typing import Any, Callable, NamedTuple, Protocol

from alf_env import _penv
from alf_env.control_plane.protocol import MessageType, read_message
from alf_env.control_plane.remote import RemoteException
from alf_env.control_plane.worker import _WorkerEnvProxy, handle_message


class JobHandler(Protocol):
    """Runs STEP and RESET jobs for one worker; built in the worker by a factory.

    Raising from either method reports ERROR for the job and sends the
    exception home on the pipe.
    """

    def step(self, arg: int) -> None:
        """Reads the action rows, steps, writes the result rows."""

    def reset(self, arg: int) -> None:
        """Resets, writes the result rows."""

    # Optional: ``after_step()``, run once a STEP job has been reported finished
    # (work that may overlap the trainer's, e.g. resetting envs that ended).


# make_handler(env, block, conn, env_id) -> JobHandler; must be picklable
# (a module-level class or function) for spawn and forkserver.
HandlerFactory = Callable[[Any, Any, Any, Any], JobHandler]


class FastLoopSpec(NamedTuple):
    """What a worker needs to join the shared region (sent with FAST_LOOP).

    Attributes:
        block: the ``SharedBlock`` (pickled with its fd, see ``alf_env.data_plane.shared_block``).
        worker_index: this worker's job slot.
        spin_us: the waiting policy (-1: adaptive, 0: never spin).
        make_handler: builds this worker's :class:`JobHandler`.
        workers_pinned: the workers are pinned to CPUs (``worker_cpus``),
            which lets the adaptive policy spin longer.
    """
    block: Any
    worker_index: int
    spin_us: int
    make_handler: HandlerFactory
    workers_pinned: bool = False

    def run(self, conn: Any, proxy: _WorkerEnvProxy, env_id: Any) -> bool:
        """Serves jobs from the native slot (the worker's ``FAST_LOOP`` entry point).

        Returns whether the worker keeps serving the pipe afterwards.
        """
        return run_fast_loop(conn, proxy, env_id, self)


# How long one wait for a job may last before the loop looks around again
# (the parent-death watchdog runs in its own thread; this only bounds how
# stale the loop can get).
_JOB_WAIT_SLICE = 1.0


def run_fast_loop(conn: Any, proxy: _WorkerEnvProxy, env_id: Any,
                  spec: FastLoopSpec) -> bool:
    """Serves jobs from the native slot; returns whether to keep serving the pipe."""
    try:
        port = spec.block.worker_port(spec.worker_index, spec.spin_us, spec.workers_pinned)
        handler = spec.make_handler(proxy.env, spec.block, conn, env_id)
    except Exception as exc:  # noqa: BLE001 -- reported; the pipe stays served
        conn.send((MessageType.EXCEPTION,
                   RemoteException(exc, env_id, "entering the native loop")))
        return True
    # Attached: tell the parent (the answer to its FAST_LOOP request).
    conn.send((MessageType.RESULT, None))
    # Enum members and methods as locals, STEP tested first and run inline:
    # this loop is the hot path.
    step, reset, call, close, none = (_penv.JobType.STEP, _penv.JobType.RESET,
                                      _penv.JobType.CALL, _penv.JobType.CLOSE,
                                      _penv.JobType.NONE)
    ok = _penv.JobStatus.OK
    wait_job, finish, handler_step = port.wait_job, port.finish, handler.step
    after_step = getattr(handler, "after_step", None)
    while True:
        job, arg = wait_job(_JOB_WAIT_SLICE)
        if job == step:
            try:
                handler_step(arg)
            except Exception as exc:  # noqa: BLE001 -- reported to the parent whole
                _report_error(conn, port, env_id, "step", exc)
                continue
            finish(ok)
            if after_step is not None:
                after_step()  # raises nothing: errors are kept for the next job
        elif job == reset:
            try:
                handler.reset(arg)
            except Exception as exc:  # noqa: BLE001 -- reported to the parent whole
                _report_error(conn, port, env_id, "reset", exc)
            else:
                finish(ok)
        elif job == call:
            try:
                msg_type, payload = read_message(conn)
            except (EOFError, OSError):
                # The parent closed the pipe (or died) mid-request: serving the
                # pipe sees it too, and closes the env quietly.
                return True
            # Finished before answering: the parent reads the answer only
            # after it has seen the job finish, and an answer larger than the
            # pipe's buffer would otherwise block both sides for ever. (The
            # parent waits for the answer itself with its own timeout.)
            finish(ok)
            if not handle_message(conn, proxy, env_id, msg_type, payload):
                return False
        elif job == close:
            finish(ok)
            return True
        elif job == none:
            continue
        else:
            raise ValueError(f"env {env_id} worker: unknown job type {job!r}")


def _report_error(conn: Any, port: Any, env_id: Any, during: str,
                  exc: Exception) -> None:
    """Reports a failed job: ERROR in the slot, then the exception on the pipe."""
    report = (MessageType.EXCEPTION, RemoteException(exc, env_id, during))
    # ERROR first: the parent reads the report once it sees ERROR, and a
    # report larger than the pipe's buffer would otherwise block both sides.
    port.finish(_penv.JobStatus.ERROR)
    conn.send(report)
