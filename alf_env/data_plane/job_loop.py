"""The worker side of the native fast path: the job loop.

After ``MessageType.JOB_LOOP`` a worker waits on its job slot (a futex wait
that releases the GIL) instead of its pipe and runs one job at a time. It
never writes to the pipe while the parent waits for a job without reading
the pipe, so no message, however large, blocks both sides. See
docs/protocol.rst, "The native job loop".
"""

import multiprocessing.connection
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence

from alf_env import _penv
from alf_env.control_plane.protocol import MessageType, read_message
from alf_env.control_plane.remote import RemoteException
from alf_env.control_plane.worker import WorkerEnvProxy, handle_message
from alf_env.data_plane.handlers import HandlerFactory
from alf_env.data_plane.shared_block import SharedBlock, WorkerPort

if TYPE_CHECKING:
    from alf_env.data_plane.job_board import JobBoard

Connection = multiprocessing.connection.Connection


class JobLoopSpec(NamedTuple):
    """What a worker needs to join the shared region (sent with JOB_LOOP).

    Attributes:
        block: the ``SharedBlock`` (pickled with its fd).
        worker_index: this worker's job slot.
        spin_us: the waiting policy (-1: adaptive, 0: never spin).
        make_handler: builds this worker's
            :class:`~alf_env.data_plane.handlers.JobHandler`.
        workers_spread: the workers are spread over the CPUs (see
            :meth:`SharedBlock.controller`), so the adaptive policy may spin longer.
    """
    block: SharedBlock
    worker_index: int
    spin_us: int
    make_handler: HandlerFactory
    workers_spread: bool = False

    def run(self, conn: Connection, proxy: WorkerEnvProxy, env_id: Optional[int]) -> bool:
        """The worker's ``JOB_LOOP`` entry point; returns whether it keeps serving the pipe."""
        return run_job_loop(conn, proxy, env_id, self)



def start_job_loops(board: "JobBoard", block: SharedBlock, spin_us: int,
                    workers_spread: bool, handlers: Sequence[HandlerFactory]) -> None:
    """Sends every worker of ``board`` into the job loop over ``block`` (the parent's side).

    Args:
        board: its controller learns each worker's pid; its doorbell serves the
            worker's pipe requests while it is in the loop.
        handlers: one job handler factory per worker, in worker order.
    """
    for w, handler in enumerate(handlers):
        join_job_loop(board, JobLoopSpec(block, w, spin_us, handler, workers_spread))


def join_job_loop(board: "JobBoard", spec: JobLoopSpec) -> None:
    """Sends worker ``spec.worker_index`` of ``board`` into the job loop of its slot
    (also a worker started again in the place of a dead one, whose port starts
    from the slot's last finished job and skips the job abandoned with it)."""
    w = spec.worker_index
    worker = board.envs[w]
    assert worker.pid is not None  # started
    board.controller.set_worker_pid(w, worker.pid)
    worker.start_job_loop(spec, board.doorbell(w))

# How long one wait for a job may last before the loop looks around again
# (the parent-death watchdog runs in its own thread; this only bounds how
# stale the loop can get).
_JOB_WAIT_SLICE = 1.0


def run_job_loop(conn: Connection, proxy: WorkerEnvProxy, env_id: Optional[int],
                  spec: JobLoopSpec) -> bool:
    """Serves jobs from the native slot; returns whether to keep serving the pipe."""
    try:
        port = spec.block.worker_port(spec.worker_index, spec.spin_us, spec.workers_spread)
        handler = spec.make_handler(proxy.env, spec.block, conn, env_id, proxy.step_clock)
    except Exception as exc:  # noqa: BLE001 -- reported; the pipe stays served
        conn.send((MessageType.EXCEPTION,
                   RemoteException(exc, env_id, "entering the job loop")))
        return True
    # Attached: tell the parent (the answer to its JOB_LOOP request).
    conn.send((MessageType.RESULT, None))
    # Enum members and methods as locals, STEP tested first and run inline:
    # this loop is the hot path.
    step, reset, call, close, none = (_penv.JobType.STEP, _penv.JobType.RESET,
                                      _penv.JobType.CALL, _penv.JobType.CLOSE,
                                      _penv.JobType.NONE)
    ok = _penv.JobStatus.OK
    wait_job, finish, handler_step = port.wait_job, port.finish, handler.step
    after_step = handler.after_step
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


def _report_error(conn: Connection, port: WorkerPort, env_id: Optional[int], during: str,
                  exc: Exception) -> None:
    """Reports a failed job: ERROR in the slot, then the exception on the pipe."""
    report = (MessageType.EXCEPTION, RemoteException(exc, env_id, during))
    # ERROR first: the parent reads the report once it sees ERROR, and a
    # report larger than the pipe's buffer would otherwise block both sides.
    port.finish(_penv.JobStatus.ERROR)
    conn.send(report)
