"""WorkerPort: timeouts, misuse, jobs from another process."""

import multiprocessing as mp
import time

import pytest

from alf_env.data_plane.shared_block import JobStatus, JobType, SharedBlock, WaitStatus


def _block(num_workers=1):
    block = SharedBlock([], num_rows=0, num_workers=num_workers)
    return block, block.controller()


@pytest.mark.parametrize("spin_us", [-1, 0, 100])
def test_wait_job_times_out_with_none(spin_us):
    block, _ = _block()
    port = block.worker_port(0, spin_us)
    start = time.monotonic()
    assert port.wait_job(timeout_s=0.2) == (JobType.NONE, 0)
    assert 0.19 <= time.monotonic() - start < 0.2 + 2.0  # upper bound: a busy machine
    start = time.monotonic()
    assert port.wait_job(timeout_s=0) == (JobType.NONE, 0)
    assert time.monotonic() - start < 1.0  # no wait (a busy machine may pause it)


def test_finish_without_a_job_and_double_wait_are_errors():
    block, controller = _block()
    port = block.worker_port(0)
    with pytest.raises(RuntimeError, match=r"no job to finish; call wait_job\(\)"):
        port.finish()
    controller.post([0], JobType.STEP)
    assert port.wait_job(timeout_s=0)[0] == JobType.STEP
    with pytest.raises(RuntimeError, match=r"call finish\(status\) before waiting"):
        port.wait_job(timeout_s=0)
    port.finish(JobStatus.OK)
    assert not port.has_job
    assert controller.wait(1, timeout_s=0)[0] == WaitStatus.OK


def test_properties():
    block, _ = _block(3)
    port = block.worker_port(2)
    assert port.worker_index == 2 and port.num_workers == 3 and not port.has_job




def _serve_one(block, conn):
    port = block.worker_port(0)
    conn.send("ready")
    start = time.monotonic()
    job, arg = port.wait_job(timeout_s=10)
    waited = time.monotonic() - start
    port.finish(JobStatus.OK)
    conn.send((int(job), arg, waited))


def test_blocked_worker_is_woken_by_a_post(start_process):
    block, controller = _block()
    parent_end, child_end = mp.Pipe()
    process = start_process(_serve_one, block, child_end)
    controller.set_worker_pid(0, process.pid)
    assert parent_end.poll(30) and parent_end.recv() == "ready"
    time.sleep(0.3)  # the worker sleeps on its futex by now
    controller.post([0], JobType.CALL, arg=123)
    assert controller.wait(1, timeout_s=10)[0] == WaitStatus.OK
    assert parent_end.poll(10)
    job, arg, waited = parent_end.recv()
    assert (job, arg) == (int(JobType.CALL), 123)
    assert 0.25 <= waited < 5
    process.join(10)
    assert process.exitcode == 0
