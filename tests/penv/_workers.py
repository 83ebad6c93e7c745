"""Worker-process loops used by the tests of alf_env._penv.

They live in an importable module (not in the test files) so that the
``spawn`` and ``forkserver`` start methods can find them by name.

STEP jobs: ``arg = (serial << DELAY_BITS) | delay_us``. The worker sleeps
``delay_us`` microseconds, then, in its row ``index`` of each field present:

* ``rec``  (int64, (3,)): ``(index, number of STEP jobs it ran, arg)``;
* ``out``  (same shape/dtype as ``inp``): a copy of its ``inp`` row.

CALL jobs are commands (see the ``CALL_*`` constants). CLOSE: finish, return.
"""

import os
import signal
import time

from alf_env import _penv
from alf_env.data_plane.shared_block import JobStatus, JobType

DELAY_BITS = 20
DELAY_MASK = (1 << DELAY_BITS) - 1

CALL_EXIT_3 = 1        # os._exit(3) while the job is outstanding
CALL_SIGKILL_SELF = 2  # SIGKILL itself while the job is outstanding
CALL_HANG = 3          # sleep (until killed) while the job is outstanding
CALL_FAIL = 4          # finish with JobStatus.ERROR
CALL_PING = 5          # finish with JobStatus.OK

POLL_S = 0.25  # how often an idle worker checks that its parent still lives


def step_arg(serial: int, delay_us: int = 0) -> int:
    """Packs a STEP argument."""
    assert 0 <= delay_us <= DELAY_MASK
    return (serial << DELAY_BITS) | delay_us


def pinned_job_worker(block, index: int, spin_us: int, cpu: int) -> None:
    """:func:`job_worker` on CPU ``cpu`` only."""
    os.sched_setaffinity(0, {cpu})
    job_worker(block, index, spin_us)


def job_worker(block, index: int, spin_us: int = -1, burn: bool = False,
               extra_delay_us: int = 0) -> None:
    """Serves jobs of slot ``index`` of ``block`` until CLOSE.

    With ``burn``, a STEP's delay is spent busy (thread CPU time), not asleep.
    ``extra_delay_us`` is added to every STEP's delay (a slow worker).
    """
    port = block.worker_port(index, spin_us)
    parent = os.getppid()
    rec = block["rec"] if "rec" in block else None
    inp = block["inp"] if "inp" in block else None
    out = block["out"] if "out" in block else None
    steps = 0
    while True:
        job, arg = port.wait_job(timeout_s=POLL_S)
        if job == JobType.NONE:
            if os.getppid() != parent:
                return  # orphaned: the test process is gone
            continue
        if job == JobType.CLOSE:
            port.finish(JobStatus.OK)
            return
        if job == JobType.CALL:
            if arg == CALL_EXIT_3:
                os._exit(3)
            elif arg == CALL_SIGKILL_SELF:
                os.kill(os.getpid(), signal.SIGKILL)
            elif arg == CALL_HANG:
                time.sleep(3600)
            port.finish(JobStatus.ERROR if arg == CALL_FAIL else JobStatus.OK)
            continue
        steps += 1
        delay_us = (arg & DELAY_MASK) + extra_delay_us
        if delay_us and burn:
            end = time.thread_time() + delay_us * 1e-6
            while time.thread_time() < end:
                pass
        elif delay_us:
            time.sleep(delay_us * 1e-6)
        if out is not None:
            out[index] = inp[index]
        if rec is not None:
            rec[index] = (index, steps, arg)
        port.finish(JobStatus.OK)


def idle_spinner(block, index: int, spin_us: int, seconds: float) -> None:
    """Waits for a job that never comes for ``seconds``, spinning ``spin_us`` per wait."""
    port = block.worker_port(index, spin_us)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        port.wait_job(timeout_s=min(POLL_S, max(0.0, end - time.monotonic())))


def wait_one_job_cpu(block, index: int, spin_us: int, timeout_s: float, conn) -> None:
    """Waits (idle) for a job for ``timeout_s``; sends back (job, CPU seconds, wall)."""
    port = block.worker_port(index, spin_us)
    conn.send("ready")
    start_cpu = time.process_time()
    start = time.monotonic()
    job, _ = port.wait_job(timeout_s=timeout_s)
    conn.send((int(job), time.process_time() - start_cpu, time.monotonic() - start))
    conn.close()


def futex_sleeper(block, offset: int, conn) -> None:
    """Sleeps on the futex word at ``offset``; sends back (result, wall, CPU)."""
    conn.send("waiting")
    start_cpu = time.process_time()
    start = time.monotonic()
    result = _penv._testing.futex_wait(block.region, offset, 0, timeout_s=10)
    conn.send((result, time.monotonic() - start, time.process_time() - start_cpu))
    conn.close()
