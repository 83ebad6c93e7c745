"""The control block: enums, header validation, job slots and the finished
queue (completion order, wrap-around, stale completions), driven in-process:
one Controller and several WorkerPorts on the same region, one thread."""

import numpy as np
import pytest

from alf_env import _penv
from alf_env.data_plane.shared_block import JobStatus, JobType, SharedBlock, WaitStatus


def _engine(num_workers):
    block = SharedBlock([("rec", (3,), np.int64)], num_rows=num_workers,
                        num_workers=num_workers)
    controller = block.controller(spin_us=0)
    ports = [block.worker_port(i, spin_us=0) for i in range(num_workers)]
    return block, controller, ports


def test_enum_values():
    assert [int(v) for v in (JobType.NONE, JobType.STEP, JobType.RESET,
                             JobType.CALL, JobType.CLOSE)] == [0, 1, 2, 3, 4]
    assert [int(JobStatus.OK), int(JobStatus.ERROR)] == [0, 1]
    assert [int(WaitStatus.OK), int(WaitStatus.TIMEOUT),
            int(WaitStatus.WORKER_DIED)] == [0, 1, 2]
    assert _penv.LAYOUT_VERSION >= 1
    assert isinstance(_penv.__version__, str)


def test_job_and_arg_reach_the_worker():
    _, controller, ports = _engine(2)
    controller.post([1], JobType.RESET, arg=-(2**63))
    assert ports[0].wait_job(timeout_s=0) == (JobType.NONE, 0)
    assert ports[1].wait_job(timeout_s=0) == (JobType.RESET, -(2**63))
    assert ports[1].has_job
    ports[1].finish(JobStatus.ERROR)
    status, ids = controller.wait(1, timeout_s=0)
    assert status == WaitStatus.OK and ids.dtype == np.int32 and list(ids) == [1]
    assert controller.status(1) == JobStatus.ERROR
    controller.post([1], JobType.STEP, arg=2**63 - 1)
    assert ports[1].wait_job(timeout_s=0) == (JobType.STEP, 2**63 - 1)
    ports[1].finish()
    assert list(controller.wait(1, timeout_s=0)[1]) == [1]
    assert controller.status(1) == JobStatus.OK


def test_completion_order_is_kept():
    _, controller, ports = _engine(4)
    controller.post(np.arange(4), JobType.STEP)
    for i in range(4):
        assert ports[i].wait_job(timeout_s=0)[0] == JobType.STEP
    for i in (2, 0, 3, 1):
        ports[i].finish()
    status, ids = controller.wait(4, timeout_s=0)
    assert status == WaitStatus.OK and list(ids) == [2, 0, 3, 1]
    assert controller.num_outstanding == 0


def test_first_k_then_the_rest_stay_queued():
    _, controller, ports = _engine(4)
    controller.post([0, 1, 2, 3], JobType.STEP)
    for i in (3, 1):
        ports[i].wait_job(timeout_s=0)
        ports[i].finish()
    assert list(controller.wait(1, timeout_s=0)[1]) == [3]
    assert not controller.outstanding(3) and controller.outstanding(1)
    assert controller.num_outstanding == 3
    status, ids = controller.wait(2, timeout_s=0)
    assert status == WaitStatus.TIMEOUT and len(ids) == 0  # only 1 finished
    assert list(controller.wait(1, timeout_s=0)[1]) == [1]  # not lost


def test_queue_wraps_around_many_times():
    _, controller, ports = _engine(3)  # queue capacity 4
    for round_ in range(2000):
        order = [(round_ + j) % 3 for j in range(3)]
        controller.post(order, JobType.STEP, arg=round_)
        for i in order:
            assert ports[i].wait_job(timeout_s=0) == (JobType.STEP, round_)
            ports[i].finish()
        status, ids = controller.wait(3, timeout_s=0)
        assert status == WaitStatus.OK and list(ids) == order


def test_post_checks_all_ids_before_posting_anything():
    _, controller, ports = _engine(3)
    controller.post([1], JobType.STEP)
    with pytest.raises(ValueError, match=r"worker 1 already has a job outstanding"):
        controller.post([0, 1, 2], JobType.STEP)
    with pytest.raises(ValueError, match=r"worker id 3 is out of range; expected 0 <= id < 3"):
        controller.post([0, 3], JobType.STEP)
    with pytest.raises(ValueError, match=r"worker id -1 is out of range"):
        controller.post([-1], JobType.STEP)
    with pytest.raises(ValueError, match=r"worker 2 is listed twice"):
        controller.post([2, 2], JobType.STEP)
    with pytest.raises(ValueError, match=r"expected JobType STEP, RESET, CALL or CLOSE, got NONE"):
        controller.post([0], JobType.NONE)
    with pytest.raises(TypeError, match="integers"):
        controller.post(np.array([0.0]), JobType.STEP)
    # nothing was posted by the failed calls
    assert ports[0].wait_job(timeout_s=0)[0] == JobType.NONE
    assert ports[2].wait_job(timeout_s=0)[0] == JobType.NONE
    assert controller.num_outstanding == 1


def test_wait_argument_checks():
    _, controller, _ = _engine(2)
    controller.post([0], JobType.STEP)
    with pytest.raises(ValueError,
                       match=r"asked for k=2 completions, but only 1 jobs are outstanding"):
        controller.wait(2, timeout_s=0)
    with pytest.raises(ValueError, match="k must be >= 0"):
        controller.wait(-1)
    with pytest.raises(ValueError, match="timeout_s must be >= 0"):
        controller.wait(1, timeout_s=-0.5)
    status, ids = controller.wait(0)
    assert status == WaitStatus.OK and len(ids) == 0


def test_abandoned_job_is_cancelled_and_its_late_completion_dropped():
    _, controller, ports = _engine(2)
    controller.post([0], JobType.STEP, arg=1)
    assert ports[0].wait_job(timeout_s=0) == (JobType.STEP, 1)
    assert controller.abandon(0) is True
    assert controller.abandon(0) is False  # nothing left to forget
    assert controller.num_outstanding == 0
    ports[0].finish()  # the late completion of the abandoned job
    controller.post([0], JobType.STEP, arg=2)
    status, ids = controller.wait(1, timeout_s=0)
    assert status == WaitStatus.TIMEOUT  # the stale completion did not count
    assert ports[0].wait_job(timeout_s=0) == (JobType.STEP, 2)
    ports[0].finish()
    assert list(controller.wait(1, timeout_s=0)[1]) == [0]


def test_abandon_of_a_finished_but_unreceived_job():
    _, controller, ports = _engine(2)
    controller.post([0, 1], JobType.STEP)
    for port in ports:
        port.wait_job(timeout_s=0)
        port.finish()
    assert controller.abandon(0)
    assert list(controller.wait(1, timeout_s=0)[1]) == [1]
    assert controller.num_outstanding == 0


def test_a_port_created_later_does_not_miss_a_posted_job():
    block = SharedBlock([], num_rows=0, num_workers=1)
    controller = block.controller()
    controller.post([0], JobType.RESET, arg=7)
    port = block.worker_port(0)
    assert port.wait_job(timeout_s=0) == (JobType.RESET, 7)


def test_a_port_for_an_abandoned_slot_skips_the_cancelled_job():
    block = SharedBlock([], num_rows=0, num_workers=1)
    controller = block.controller()
    controller.post([0], JobType.STEP, arg=7)
    controller.abandon(0)  # e.g. the worker died; a new one takes its slot
    port = block.worker_port(0)
    assert port.wait_job(timeout_s=0) == (JobType.NONE, 0)
    controller.post([0], JobType.RESET, arg=8)
    assert port.wait_job(timeout_s=0) == (JobType.RESET, 8)


def test_one_controller_per_region():
    block = SharedBlock([], num_rows=0, num_workers=2)
    block.controller()
    with pytest.raises(ValueError, match="already holds a control block"):
        block.controller()


def test_worker_attach_validates_the_header():
    block = SharedBlock([], num_rows=0, num_workers=2)
    with pytest.raises(ValueError, match="Create the Controller in the main process"):
        block.worker_port(0)
    block.controller()
    with pytest.raises(ValueError, match=r"worker_index 2 is out of range"):
        block.worker_port(2)
    with pytest.raises(ValueError,
                       match=r"expected num_workers=1, but the control block was made for 2"):
        _penv.WorkerPort(block.region, 1, 0)
    # A region too small for the claimed number of workers.
    with pytest.raises(ValueError, match=r"needs \d+"):
        _penv.WorkerPort(block.region, 64, 0)


def test_layout_version_mismatch_is_loud():
    block = SharedBlock([], num_rows=0, num_workers=1)
    block.controller()
    raw = np.frombuffer(block.region, dtype=np.uint32)
    raw[2] += 1  # the header's layout_version (after the 8-byte magic)
    with pytest.raises(ValueError, match="expected control-block layout version"):
        block.worker_port(0)


def test_none_region_is_a_type_error():
    with pytest.raises(TypeError):
        _penv.Controller(None, 1)
    with pytest.raises(TypeError):
        _penv.WorkerPort(None, 1, 0)
