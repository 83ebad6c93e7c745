"""The main process is woken once per wait(k), not once per completion."""

import psutil

from alf_env.data_plane.shared_block import JobType, WaitStatus

from . import _workers
from .conftest import close_workers, make_block, start_job_workers


def test_wait_for_k_sleeps_through_earlier_completions(start_process):
    n = 8
    block = make_block(n)
    controller = block.controller(spin_us=0)  # always sleep: count the wake-ups
    processes = start_job_workers(start_process, block, controller, n, 0)
    controller.post(range(n), JobType.STEP, _workers.step_arg(0))
    assert controller.wait(n, timeout_s=30)[0] == WaitStatus.OK
    me = psutil.Process()
    wakeups = []
    for serial in range(1, 6):
        # Completions 3 ms apart: 8 of them end well inside one 50 ms pid-poll slice.
        for i in range(n):
            controller.post([i], JobType.STEP, _workers.step_arg(serial, delay_us=i * 3000))
        before = me.num_ctx_switches().voluntary
        status, ids = controller.wait(n, timeout_s=30)
        wakeups.append(me.num_ctx_switches().voluntary - before)
        assert status == WaitStatus.OK and sorted(ids) == list(range(n))
    close_workers(controller, processes)
    # One sleep per wait (plus slack for a pid poll or a spurious wake), not 8.
    assert min(wakeups) <= 3, wakeups


def test_failed_lists_workers_whose_job_reported_error(start_process):
    block = make_block(3)
    controller = block.controller()
    processes = start_job_workers(start_process, block, controller, 3)
    controller.post([0, 2], JobType.STEP, _workers.step_arg(0))
    controller.post([1], JobType.CALL, _workers.CALL_FAIL)
    status, ids = controller.wait(3, timeout_s=30)
    assert status == WaitStatus.OK
    assert controller.failed(ids) == [1]
    assert controller.failed([0, 2]) == []
    close_workers(controller, processes)
