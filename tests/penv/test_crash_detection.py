"""A worker that dies with a job outstanding is reported promptly."""

import os
import signal
import time

import pytest

from alf_env.data_plane.shared_block import JobType, WaitStatus

from . import _workers
from .conftest import close_workers, make_block

REPORT_WITHIN_S = 1.0


def _start(start_process, num_workers):
    block = make_block(num_workers)
    controller = block.controller()
    processes = []
    for i in range(num_workers):
        process = start_process(_workers.job_worker, block, i)
        controller.set_worker_pid(i, process.pid)
        processes.append(process)
    return block, controller, processes


@pytest.mark.parametrize("command, exitcode", [
    (_workers.CALL_EXIT_3, 3),
    (_workers.CALL_SIGKILL_SELF, -signal.SIGKILL),
])
def test_worker_dying_during_a_job(start_process, command, exitcode):
    _, controller, processes = _start(start_process, 2)
    controller.post([1], JobType.CALL, command)
    start = time.monotonic()
    status, ids = controller.wait(1, timeout_s=30)
    assert time.monotonic() - start < REPORT_WITHIN_S
    assert status == WaitStatus.WORKER_DIED and list(ids) == [1]
    processes[1].join(10)
    assert processes[1].exitcode == exitcode
    assert controller.outstanding(1)  # until abandoned
    assert controller.abandon(1)
    close_workers(controller, processes)


def test_worker_sigkilled_while_main_waits(start_process):
    _, controller, processes = _start(start_process, 3)
    controller.post([0, 1, 2], JobType.CALL, _workers.CALL_HANG)
    time.sleep(0.2)
    os.kill(processes[2].pid, signal.SIGKILL)
    start = time.monotonic()
    status, ids = controller.wait(3, timeout_s=30)
    assert time.monotonic() - start < REPORT_WITHIN_S
    assert status == WaitStatus.WORKER_DIED and list(ids) == [2]
    # Reported again until abandoned; never a hang.
    status, ids = controller.wait(3, timeout_s=30)
    assert status == WaitStatus.WORKER_DIED and list(ids) == [2]
    controller.abandon(2)
    for process in processes[:2]:
        process.kill()
    for process in processes[:2]:
        # Both gone before the wait: on a busy machine the second could
        # still be dying when the wait reports the first.
        process.join(10)
    start = time.monotonic()
    status, ids = controller.wait(2, timeout_s=30)
    assert time.monotonic() - start < REPORT_WITHIN_S
    assert status == WaitStatus.WORKER_DIED and sorted(ids) == [0, 1]


def test_others_keep_working_after_a_death(start_process):
    block, controller, processes = _start(start_process, 3)
    controller.post([0, 2], JobType.STEP, _workers.step_arg(1))
    controller.post([1], JobType.CALL, _workers.CALL_EXIT_3)
    status, ids = controller.wait(3, timeout_s=30)
    assert status == WaitStatus.WORKER_DIED and list(ids) == [1]
    controller.abandon(1)
    status, ids = controller.wait(2, timeout_s=30)  # the completions survived
    assert status == WaitStatus.OK and sorted(ids) == [0, 2]
    for round_ in range(2, 20):
        controller.post([0, 2], JobType.STEP, _workers.step_arg(round_))
        status, ids = controller.wait(2, timeout_s=30)
        assert status == WaitStatus.OK and sorted(ids) == [0, 2]
        assert block["rec"][0][1] == round_ and block["rec"][2][1] == round_
    close_workers(controller, processes)


def test_death_is_reported_while_other_completions_keep_arriving(start_process):
    # k=1 waits keep being satisfied by live workers; the dead one must still
    # be reported within the poll interval instead of being silently skipped.
    _, controller, processes = _start(start_process, 3)
    controller.post([0], JobType.CALL, _workers.CALL_HANG)
    time.sleep(0.1)
    processes[0].kill()
    deadline = time.monotonic() + REPORT_WITHIN_S
    idle = [1, 2]
    reported = False
    while time.monotonic() < deadline and not reported:
        if idle:
            controller.post(idle, JobType.STEP, _workers.step_arg(1))
            idle = []
        status, ids = controller.wait(1, timeout_s=30)
        if status == WaitStatus.WORKER_DIED:
            assert list(ids) == [0]
            reported = True
        else:
            idle.extend(int(i) for i in ids)
    assert reported
    controller.abandon(0)
    if controller.num_outstanding:
        assert controller.wait(controller.num_outstanding, timeout_s=30)[0] == WaitStatus.OK
    close_workers(controller, processes)


def test_a_worker_that_finishes_then_exits_is_not_a_death(start_process):
    _, controller, processes = _start(start_process, 4)
    for _ in range(5):
        controller.post(range(4), JobType.STEP, _workers.step_arg(1))
        assert controller.wait(4, timeout_s=30)[0] == WaitStatus.OK
    controller.post(range(4), JobType.CLOSE)
    for process in processes:
        process.join(10)  # all exited before we even look
    status, ids = controller.wait(4, timeout_s=30)
    assert status == WaitStatus.OK and sorted(ids) == [0, 1, 2, 3]


def test_without_a_pid_a_death_ends_in_timeout(start_process):
    block = make_block(1)
    controller = block.controller()
    process = start_process(_workers.job_worker, block, 0)  # pid not registered
    controller.post([0], JobType.CALL, _workers.CALL_EXIT_3)
    process.join(10)
    start = time.monotonic()
    status, ids = controller.wait(1, timeout_s=0.3)
    assert status == WaitStatus.TIMEOUT and len(ids) == 0
    assert 0.29 <= time.monotonic() - start < 0.3 + 2.0  # upper bound: a busy machine
