"""The job loop, the worker side of the native fast path (docs/protocol.rst, "The native
job loop")."""

from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence

from alf_env import _penv
from alf_env.control_plane.protocol import MessageType, read_message
from alf_env.control_plane.remote import RemoteException
from alf_env.control_plane.worker import WorkerEnvProxy, handle_message
from alf_env.data_plane.handlers import HandlerFactory
from alf_env.data_plane.shared_block import SharedBlock, WorkerPort

if TYPE_CHECKING:
    from alf_env.data_plane.job_board import JobBoard


class JobLoopSpec(NamedTuple):
    """What a worker needs to join the shared region (JOB_LOOP's payload): its job slot, the
    waiting policy (as for :meth:`SharedBlock.controller`) and its handler's factory."""
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
    """Sends every worker of ``board`` into the job loop over ``block`` (one handler each)."""
    for w, handler in enumerate(handlers):
        join_job_loop(board, JobLoopSpec(block, w, spin_us, handler, workers_spread))


def join_job_loop(board: "JobBoard", spec: JobLoopSpec) -> None:
    """Sends worker ``spec.worker_index`` of ``board`` into the job loop of its slot (also
    a restarted worker, whose port skips the job abandoned with the dead one)."""
    w = spec.worker_index
    worker = board.envs[w]
    assert worker.pid is not None  # started
    board.controller.set_worker_pid(w, worker.pid)
    worker.start_job_loop(spec, board.doorbell(w))


# Seconds one wait for a job may last (the parent-death watchdog has its own thread).
_JOB_WAIT_SLICE = 1.0


def run_job_loop(conn: Connection, proxy: WorkerEnvProxy, env_id: Optional[int],
                  spec: JobLoopSpec) -> bool:
    """Serves jobs from the native slot; returns whether to keep serving the pipe."""
    try:
        port = spec.block.worker_port(spec.worker_index, spec.spin_us, spec.workers_spread)
        handler = spec.make_handler(proxy.env, spec.block, conn, env_id, proxy.step_clock)
    except Exception as exc:  # noqa: BLE001 -- reported; the pipe stays served
        conn.send((MessageType.EXCEPTION, RemoteException(exc, env_id, "entering the job loop")))
        return True
    conn.send((MessageType.RESULT, None))
    # The hot path: enum members and methods as locals, STEP tested first.
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
            except (EOFError, OSError):  # the parent is gone: serve() closes the env
                return True
            # Finished first: the parent reads the answer only then (a large one would block).
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
    # ERROR first: the parent reads the report once it sees ERROR (a large one would block).
    port.finish(_penv.JobStatus.ERROR)
    conn.send(report)
