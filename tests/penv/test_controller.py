"""Controller with real worker processes: wakes, timeouts, signals, misuse."""

import os
import threading
import time

import numpy as np
import pytest

from alf_env.data_plane.shared_block import JobStatus, JobType, WaitStatus
from tests.support.signals import alarm

from . import _workers
from .conftest import close_workers, make_block


def _start(start_process, num_workers, spin_us=-1):
    block = make_block(num_workers)
    controller = block.controller(spin_us)
    processes = []
    for i in range(num_workers):
        process = start_process(_workers.job_worker, block, i, spin_us)
        controller.set_worker_pid(i, process.pid)
        processes.append(process)
    return block, controller, processes


@pytest.mark.parametrize("spin_us", [-1, 0, 50])
def test_step_all_and_wait_for_all(start_process, spin_us):
    block, controller, processes = _start(start_process, 3, spin_us)
    for round_ in range(1, 51):
        block["inp"][:] = np.arange(3)[:, None] * 1000 + round_
        controller.post(range(3), JobType.STEP, _workers.step_arg(round_))
        status, ids = controller.wait(3, timeout_s=10)
        assert status == WaitStatus.OK and sorted(ids) == [0, 1, 2]
        np.testing.assert_array_equal(block["out"], block["inp"])
        for i in range(3):
            assert tuple(block["rec"][i]) == (i, round_, _workers.step_arg(round_))
            assert controller.status(i) == JobStatus.OK
    close_workers(controller, processes)


def test_error_status_travels_back(start_process):
    _, controller, processes = _start(start_process, 1)
    controller.post([0], JobType.CALL, _workers.CALL_FAIL)
    assert controller.wait(1, timeout_s=10)[0] == WaitStatus.OK
    assert controller.status(0) == JobStatus.ERROR
    controller.post([0], JobType.CALL, _workers.CALL_PING)
    assert controller.wait(1, timeout_s=10)[0] == WaitStatus.OK
    assert controller.status(0) == JobStatus.OK
    close_workers(controller, processes)


def test_run_posts_waits_and_names_the_failed_jobs(start_process):
    block, controller, processes = _start(start_process, 2)
    block["inp"][:] = [[7], [8]]
    status, ids, failed = controller.run([0, 1], JobType.STEP, _workers.step_arg(1), 10)
    assert status == WaitStatus.OK and sorted(ids) == [0, 1] and failed == []
    np.testing.assert_array_equal(block["out"], block["inp"])
    status, ids, failed = controller.run([0], JobType.CALL, _workers.CALL_FAIL, 10)
    assert (status, ids.tolist(), failed) == (WaitStatus.OK, [0], [0])
    # run() is for a lockstep step only: with a job outstanding it posts nothing.
    controller.post([1], JobType.STEP, _workers.step_arg(2, delay_us=200_000))
    with pytest.raises(ValueError, match="no outstanding job"):
        controller.run([0], JobType.STEP, _workers.step_arg(3))
    assert controller.num_outstanding == 1
    status, ids = controller.wait(1, timeout_s=10)
    assert status == WaitStatus.OK and ids.tolist() == [1]
    # A timeout returns no ids and keeps the job, as wait() does.
    status, ids, failed = controller.run([1], JobType.STEP,
                                         _workers.step_arg(4, delay_us=400_000), 0.05)
    assert (status, ids.tolist(), failed) == (WaitStatus.TIMEOUT, [], [])
    assert controller.wait(1, timeout_s=10)[0] == WaitStatus.OK
    close_workers(controller, processes)


def test_timeout_returns_no_ids_and_loses_nothing(start_process):
    _, controller, processes = _start(start_process, 2)
    controller.post([0], JobType.STEP, _workers.step_arg(1))                     # fast
    controller.post([1], JobType.STEP, _workers.step_arg(2, delay_us=400_000))   # slow
    start = time.monotonic()
    status, ids = controller.wait(2, timeout_s=0.15)
    elapsed = time.monotonic() - start
    assert status == WaitStatus.TIMEOUT and len(ids) == 0
    assert 0.14 <= elapsed < 0.15 + 2.0  # upper bound: a busy machine
    status, ids = controller.wait(1, timeout_s=10)
    assert status == WaitStatus.OK and list(ids) == [0]  # the fast one, kept
    status, ids = controller.wait(1, timeout_s=10)
    assert status == WaitStatus.OK and list(ids) == [1]
    close_workers(controller, processes)


class _Interrupted(Exception):
    pass


def test_python_signal_interrupts_wait_without_losing_completions(start_process):
    _, controller, processes = _start(start_process, 1)
    # A 1 s job: the signal (at 0.1 s) interrupts the wait well before it ends,
    # even on a busy machine.
    controller.post([0], JobType.STEP, _workers.step_arg(1, delay_us=1_000_000))
    with alarm(_Interrupted, 0.1):
        start = time.monotonic()
        with pytest.raises(_Interrupted):
            controller.wait(1, timeout_s=10)
        assert time.monotonic() - start < 0.8
    assert controller.outstanding(0)
    status, ids = controller.wait(1, timeout_s=10)
    assert status == WaitStatus.OK and list(ids) == [0]
    close_workers(controller, processes)


def test_wait_releases_the_gil(start_process):
    _, controller, processes = _start(start_process, 1)
    controller.post([0], JobType.STEP, _workers.step_arg(1, delay_us=300_000))
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        assert controller.wait(1, timeout_s=10)[0] == WaitStatus.OK
    finally:
        stop.set()
        thread.join()
    assert len(ticks) >= 10  # the other thread ran while we waited
    close_workers(controller, processes)


def test_concurrent_use_from_two_threads_is_refused(start_process):
    _, controller, processes = _start(start_process, 2)
    controller.post([0], JobType.STEP, _workers.step_arg(1, delay_us=500_000))
    result = {}

    def waiter():
        result["wait"] = controller.wait(1, timeout_s=10)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.1)  # the waiter is inside wait() now
    try:
        with pytest.raises(RuntimeError, match="not thread-safe"):
            controller.post([1], JobType.STEP)
        with pytest.raises(RuntimeError, match="Controller.run: another thread"):
            controller.run([1], JobType.STEP)
    finally:
        thread.join()
    assert result["wait"][0] == WaitStatus.OK
    close_workers(controller, processes)


def test_set_worker_pid_errors():
    block = make_block(1)
    controller = block.controller()
    with pytest.raises(ValueError, match="out of range"):
        controller.set_worker_pid(1, os.getpid())
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # reaped: the pid no longer exists
    with pytest.raises(ProcessLookupError, match="pidfd_open"):
        controller.set_worker_pid(0, pid)
    controller.set_worker_pid(0, os.getpid())
    controller.set_worker_pid(0, 0)  # stop watching


def _wait_until_asleep_on(controller, cpus, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while [controller.sleep_cpu(w) for w in range(len(cpus))] != cpus:
        assert time.monotonic() < deadline, [controller.sleep_cpu(w) for w in range(len(cpus))]
        time.sleep(0.01)


def test_sleep_cpu_is_unknown_until_a_worker_sleeps_and_checks_its_id():
    controller = make_block(2).controller(0)
    assert [controller.sleep_cpu(w) for w in range(2)] == [-1, -1]
    with pytest.raises(ValueError, match=r"Controller.sleep_cpu: worker id 2 is out of range"):
        controller.sleep_cpu(2)
    with pytest.raises(ValueError, match=r"Controller.wake_order: worker id -1 is out of range"):
        controller.wake_order([0, -1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_post_wakes_the_worker_asleep_on_the_posting_cpu_last(start_process):
    # A worker woken on the poster's CPU may take that CPU at once; the other
    # worker's wake must not wait behind its whole job.
    cpus = sorted(os.sched_getaffinity(0))[:2]
    block = make_block(2)
    controller = block.controller(0)  # spin_us=0: the workers sleep at once
    processes = []
    for w, cpu in enumerate(cpus):
        processes.append(start_process(_workers.pinned_job_worker, block, w, 0, cpu))
        controller.set_worker_pid(w, processes[-1].pid)
    allowed = os.sched_getaffinity(0)
    try:
        _wait_until_asleep_on(controller, cpus)
        os.sched_setaffinity(0, {cpus[0]})  # this thread posts from worker 0's CPU
        assert controller.wake_order([0, 1]) == [1, 0]
        assert controller.wake_order([1, 0]) == [1, 0]
        assert controller.wake_order([0]) == [0]
        os.sched_setaffinity(0, {cpus[1]})
        assert controller.wake_order([0, 1]) == [0, 1]
        assert controller.wake_order([1, 0]) == [0, 1]
        for round_ in range(1, 21):  # and both still get every job
            block["inp"][:] = np.arange(2)[:, None] * 1000 + round_
            controller.post([0, 1], JobType.STEP, _workers.step_arg(round_))
            status, ids = controller.wait(2, timeout_s=10)
            assert status == WaitStatus.OK and sorted(ids) == [0, 1]
            np.testing.assert_array_equal(block["out"], block["inp"])
    finally:
        os.sched_setaffinity(0, allowed)
    close_workers(controller, processes)
