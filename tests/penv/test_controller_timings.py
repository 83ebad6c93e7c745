"""Controller.take_timings: the per-batch figures from the job slots' clocks."""

from alf_env import _penv
from alf_env.control_plane.step_timings import NUM_BUCKETS, batch_figures, bucket_of
from alf_env.data_plane.shared_block import JobType, WaitStatus

from . import _workers
from .conftest import close_workers, make_block

SLOW_US = 5000


def _start(start_process, num_workers, slow_worker=None):
    block = make_block(num_workers)
    controller = block.controller()
    processes = []
    for i in range(num_workers):
        extra = SLOW_US if i == slow_worker else 0
        process = start_process(_workers.job_worker, block, i, -1, False, extra)
        controller.set_worker_pid(i, process.pid)
        processes.append(process)
    return block, controller, processes


def _lockstep(controller, workers, serial):
    controller.post(workers, JobType.STEP, _workers.step_arg(serial))
    status, ids = controller.wait(len(workers), timeout_s=10)
    assert status == WaitStatus.OK and sorted(ids) == sorted(workers)


def test_bucket_count_and_buckets_match_python():
    assert _penv.TIMING_BUCKETS == NUM_BUCKETS
    for ns in [0, 1, 7, 8, 9, 15, 16, 17, 1000, 123_456, 5_000_000, 2**40 + 3, 2**64 - 1]:
        assert _penv._testing.timing_bucket(ns) == bucket_of(ns), ns


def test_a_slow_worker_shows_as_straggler_spread_not_hand_off(start_process):
    _, controller, processes = _start(start_process, 3, slow_worker=1)
    count, sums, histograms = controller.take_timings()
    assert count == 0 and sums == (0, 0, 0) and not histograms.any()
    rounds = 20
    for serial in range(1, rounds + 1):
        _lockstep(controller, [0, 1, 2], serial)
    taken = controller.take_timings()
    assert taken[0] == rounds
    assert histograms.shape == taken[2].shape == (3, NUM_BUCKETS)
    assert [int(h.sum()) for h in taken[2]] == [rounds] * 3
    wait, spread, handoff = batch_figures(taken)
    assert wait.count == spread.count == handoff.count == rounds
    # Wide margins: the machine may be loaded. The slow worker sleeps 5 ms.
    assert 4_500 <= wait.p50_us <= 50_000
    assert 3_000 <= spread.p50_us <= wait.p50_us * 1.2
    assert 0 <= handoff.mean_us <= wait.mean_us
    # The hand-off is the wait minus the slowest worker's work: not its 5 ms.
    assert handoff.p50_us < wait.p50_us - 3_000
    assert controller.take_timings()[0] == 0  # reset by the take
    close_workers(controller, processes)


def test_only_lockstep_step_batches_count(start_process):
    _, controller, processes = _start(start_process, 2)
    _lockstep(controller, [0, 1], 1)                       # counts
    controller.post([0], JobType.STEP, _workers.step_arg(2))
    controller.post([1], JobType.STEP, _workers.step_arg(2))  # overlaps: none counts
    assert controller.wait(2, timeout_s=10)[0] == WaitStatus.OK
    controller.post([0, 1], JobType.CALL, _workers.CALL_PING)  # not a STEP
    assert controller.wait(2, timeout_s=10)[0] == WaitStatus.OK
    controller.post([0, 1], JobType.STEP, _workers.step_arg(3))
    assert controller.wait(1, timeout_s=10)[0] == WaitStatus.OK
    assert controller.take_timings()[0] == 1               # the second is still running
    assert controller.wait(1, timeout_s=10)[0] == WaitStatus.OK
    assert controller.take_timings()[0] == 1               # ... and counts when done
    _lockstep(controller, [1], 4)                          # one worker is a batch too
    count, sums, _ = controller.take_timings()
    assert count == 1 and sums[1] == 0                     # no spread with one worker
    close_workers(controller, processes)
