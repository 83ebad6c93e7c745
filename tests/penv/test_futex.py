"""Futex wait/wake across processes, timeouts, and the spin policy's CPU use."""

import itertools
import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from alf_env import _penv
from alf_env._penv import _testing
from alf_env.data_plane.shared_block import JobType, SharedBlock

from . import _workers
from .conftest import start_job_workers

WORD = 0  # offset of the futex word used in these tests


def test_wait_returns_at_once_if_the_value_differs():
    region = _penv.SharedRegion(64)
    _testing.store_u32(region, WORD, 5)
    start = time.monotonic()
    assert _testing.futex_wait(region, WORD, 4, timeout_s=5) == "value_changed"
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("timeout_s", [0.0, 0.05, 0.2])
def test_wait_with_timeout_returns_in_time(timeout_s):
    region = _penv.SharedRegion(64)
    start = time.monotonic()
    assert _testing.futex_wait(region, WORD, 0, timeout_s=timeout_s) == "timed_out"
    elapsed = time.monotonic() - start
    assert timeout_s * 0.9 <= elapsed < timeout_s + 2.0  # upper bound: a busy machine


def test_wake_without_waiters_wakes_nobody():
    region = _penv.SharedRegion(64)
    assert _testing.futex_wake(region, WORD, 1) == 0


def test_bad_offsets_are_rejected():
    region = _penv.SharedRegion(64)
    with pytest.raises(ValueError, match="multiple of 4"):
        _testing.futex_wait(region, 2, 0, timeout_s=0)
    with pytest.raises(ValueError, match="inside the region"):
        _testing.futex_wake(region, 64)


def test_negative_timeout_is_rejected():
    region = _penv.SharedRegion(64)
    with pytest.raises(ValueError, match="timeout_s must be >= 0"):
        _testing.futex_wait(region, WORD, 0, timeout_s=-1)




@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_wake_from_another_process(start_process, method):
    # The child gets the region through a SharedBlock: inherited under fork,
    # re-attached from a passed fd under spawn.
    block = SharedBlock([("pad", (16,), np.uint8)], num_rows=1, num_workers=1)
    region = block.region
    offset = block.layout.fields[0].offset
    parent_end, child_end = mp.Pipe()
    start_process(_workers.futex_sleeper, block, offset, child_end, method=method)
    assert parent_end.poll(60) and parent_end.recv() == "waiting"
    time.sleep(0.3)  # let it fall asleep
    _testing.store_u32(region, offset, 1)
    woken = _testing.futex_wake(region, offset, 1)
    assert parent_end.poll(10)
    result, elapsed, cpu = parent_end.recv()
    assert result == "woken" and woken == 1
    assert elapsed < 5.0
    assert cpu < 0.1  # it slept, it did not spin


def test_spin_budgets():
    cpus = _testing.usable_cpu_count()
    assert cpus >= 1
    for spin_us, expected in [(0, 0.0), (30, 30.0), (1000, 1000.0)]:
        block = SharedBlock([], num_rows=0, num_workers=1)
        assert block.controller(spin_us).spin_budget_us == expected
        assert block.worker_port(0, spin_us).spin_budget_us == expected


def test_adaptive_spin_only_yields_when_processes_outnumber_cpus():
    cpus = _testing.usable_cpu_count()
    block = SharedBlock([], num_rows=0, num_workers=cpus)  # cpus + 1 processes
    controller = block.controller()
    assert controller.spin_yields_only and block.worker_port(0).spin_yields_only
    assert controller.spin_budget_us == 2000  # kAdaptiveMaxYieldSpin
    block = SharedBlock([], num_rows=0, num_workers=cpus)
    controller = block.controller(workers_spread=True)
    assert controller.spin_yields_only
    assert block.worker_port(0, workers_spread=True).spin_yields_only
    assert controller.spin_budget_us == 5000  # kAdaptiveMaxSpreadSpin


def test_a_worker_waiting_for_its_next_job_spins_50_us_at_most_in_every_mode():
    # That wait is the trainer's own time between steps (module doc of futex.h).
    cpus = _testing.usable_cpu_count()
    for num_workers in (1, cpus, 2 * cpus):
        for pinned in (False, True):
            block = SharedBlock([], num_rows=0, num_workers=num_workers)
            block.controller(workers_spread=pinned)
            assert block.worker_port(0, workers_spread=pinned).spin_budget_us == 50
    # A fixed budget is the caller's own: kept.
    block = SharedBlock([], num_rows=0, num_workers=1)
    block.controller(1000)
    assert block.worker_port(0, 1000).spin_budget_us == 1000


def test_the_main_process_sets_the_job_wait_cap_and_each_worker_applies_it_at_its_next_wait():
    cpus = _testing.usable_cpu_count()
    block = SharedBlock([], num_rows=0, num_workers=cpus)  # oversubscribed: yield-spinning
    controller = block.controller(workers_spread=True)
    port = block.worker_port(0, workers_spread=True)
    assert controller.job_wait_spin_us == 50
    controller.job_wait_spin_us = 0  # the mode's own cap
    assert port.spin_budget_us == 50  # not before its next wait
    assert port.wait_job(timeout_s=0) == (JobType.NONE, 0)
    assert port.spin_budget_us == 5000  # kAdaptiveMaxSpreadSpin
    controller.job_wait_spin_us = 300
    port.wait_job(timeout_s=0)
    assert controller.job_wait_spin_us == 300 and port.spin_budget_us == 300
    # A fixed budget is the caller's own: the cap leaves it alone.
    block = SharedBlock([], num_rows=0, num_workers=1)
    controller = block.controller(1000)
    port = block.worker_port(0, 1000)
    controller.job_wait_spin_us = 0
    port.wait_job(timeout_s=0)
    assert port.spin_budget_us == 1000
    with pytest.raises(ValueError, match=r"expected a cap in \[0, 1000000\] µs"):
        controller.job_wait_spin_us = -1


@pytest.mark.skipif(_testing.usable_cpu_count() < 2, reason="needs 2 CPUs")
def test_pinned_workers_do_not_change_the_cap_without_oversubscription():
    block = SharedBlock([], num_rows=0, num_workers=1)  # 2 processes
    assert block.controller(workers_spread=True).spin_budget_us == 100


@pytest.mark.skipif(_testing.usable_cpu_count() < 2, reason="needs 2 CPUs")
def test_adaptive_spin_starts_on_when_cpus_suffice():
    block = SharedBlock([], num_rows=0, num_workers=1)  # 2 processes
    controller = block.controller()
    assert not controller.spin_yields_only and not block.worker_port(0).spin_yields_only
    assert controller.spin_budget_us == 100  # kAdaptiveMaxSpin


def test_a_wait_that_slept_within_the_cap_restores_the_adaptive_budget():
    # A worker's job wait (futex.h): a failed spin halves the budget, down to
    # sleeping at once; a wait that then slept but ended within the cap sets it
    # to twice that wait, so one long wait does not leave the worker sleeping
    # (and paying a wake-up) through every short wait after it.
    policy = _testing.SpinPolicy(-1, 2, cap_us=50)
    assert policy.budget_us == 50
    budgets = []
    while policy.budget_us:
        assert not policy.fail()
        budgets.append(policy.budget_us)
    assert budgets == [25, 12.5, 6.25, 3.125, 0]
    policy.record_wait(20)
    assert policy.budget_us == 40
    policy.record_wait(30)
    assert policy.budget_us == 50  # the cap
    assert not policy.fail()
    policy.record_wait(80)  # longer than the cap: the halving stands
    assert policy.budget_us == 25
    for spin_us in (0, 300):  # a fixed budget (or none) is the caller's own
        fixed = _testing.SpinPolicy(spin_us, 2)
        fixed.record_wait(10)
        assert fixed.budget_us == spin_us


def test_adaptive_spin_learns_to_sleep_through_long_jobs(start_process):
    # Oversubscribed (cpus + 1 processes), pinned workers: the budget starts
    # at 5 ms; jobs of 20 ms make every spin fail, so it halves to nothing
    # within ~13 waits and the main process then sleeps at once.
    cpus = _testing.usable_cpu_count()
    block = SharedBlock([("rec", (3,), np.int64)], num_rows=cpus, num_workers=cpus)
    controller = block.controller(workers_spread=True)
    assert controller.spin_budget_us == 5000
    process, = start_job_workers(start_process, block, controller, 1)
    budgets = []
    for serial in range(1, 20):
        controller.post([0], JobType.STEP, _workers.step_arg(serial, delay_us=20_000))
        status, ids = controller.wait(1, timeout_s=30)
        assert status == _penv.WaitStatus.OK and list(ids) == [0]
        budgets.append(controller.spin_budget_us)
    assert budgets == sorted(budgets, reverse=True), budgets
    assert budgets[-1] == 0, budgets
    controller.post([0], JobType.CLOSE)
    assert controller.wait(1, timeout_s=10)[0] == _penv.WaitStatus.OK
    process.join(10)


def cpu_share(seconds: float = 0.2) -> float:
    """The share of a core this process gets while it spins for ``seconds``
    (about 1.0 unless other processes want the cores)."""
    wall, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        pass
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def test_adaptive_spin_keeps_its_budget_for_short_jobs(start_process):
    # The same oversubscribed pair with instant jobs: every spin succeeds, so
    # the budget stays up and the waits do not pay a wake-up each. Beside busy
    # processes an instant job waits for a time slice, past the budget: spinning
    # rightly stops paying there, so there is nothing to test.
    if cpu_share() < 0.9:
        pytest.skip("other processes want the cores")
    cpus = _testing.usable_cpu_count()
    block = SharedBlock([("rec", (3,), np.int64)], num_rows=cpus, num_workers=cpus)
    controller = block.controller()
    process, = start_job_workers(start_process, block, controller, 1)
    waits = []
    for serial in range(1, 200):
        controller.post([0], JobType.STEP, _workers.step_arg(serial))
        begin = time.perf_counter()
        assert controller.wait(1, timeout_s=30)[0] == _penv.WaitStatus.OK
        waits.append(time.perf_counter() - begin)
    budget = controller.spin_budget_us
    controller.post([0], JobType.CLOSE)
    assert controller.wait(1, timeout_s=10)[0] == _penv.WaitStatus.OK
    process.join(10)
    # On a busy machine an instant job often waits for a time slice (milliseconds),
    # past the budget: spinning rightly stops paying there, and each such wait
    # halves the budget, so there is nothing to test. The last waits decide the
    # final budget (a few slow ones in a row bring it to 0 until a probe succeeds).
    if (sorted(waits)[len(waits) * 9 // 10] > 200e-6 or max(waits[-10:]) > 200e-6
            or cpu_share() < 0.9):
        pytest.skip("the machine is too busy: instant jobs took over 0.2 ms")
    assert budget > 0


def test_yield_only_spinners_leave_the_cpu_to_busy_workers(start_process):
    # Oversubscribed: one CPU-bound worker per CPU, plus two idle workers per
    # CPU that spin (fixed 1 s budget, so they spin all the time). Spinning
    # only yields then, so each busy worker still gets ~its whole CPU: a round
    # of 50 ms jobs takes as long as without the spinners. Spinners that kept
    # the CPU would get a fair share each and make it ~3x as long. Everyone is
    # pinned (burner i and two spinners on CPU i): this is about sharing a
    # core, not about placement (a runnable spinner counts as load for the
    # kernel's balancer, which may then leave two burners on one core). The
    # rounds without spinners come first, so a foreign load on the machine
    # slows both sets alike.
    cpu_ids = sorted(os.sched_getaffinity(0))
    cpus = len(cpu_ids)
    burners, spinners = cpus, 2 * cpus
    block = SharedBlock([("rec", (3,), np.int64)], num_rows=burners + spinners,
                        num_workers=burners + spinners)
    controller = block.controller(0)
    processes = start_job_workers(start_process, block, controller, burners, 0, True)
    for i, process in enumerate(processes):
        os.sched_setaffinity(process.pid, {cpu_ids[i]})
    job_s, rounds, serials = 0.05, 6, itertools.count(1)

    def median_round() -> float:
        walls = []
        for _ in range(rounds):
            start = time.monotonic()
            controller.post(list(range(burners)), JobType.STEP,
                            _workers.step_arg(next(serials), delay_us=int(job_s * 1e6)))
            status, ids = controller.wait(burners, timeout_s=30)
            walls.append(time.monotonic() - start)
            assert status == _penv.WaitStatus.OK and sorted(ids) == list(range(burners))
        return sorted(walls)[rounds // 2]

    alone = median_round()
    for i in range(burners, burners + spinners):
        spinner = start_process(_workers.idle_spinner, block, i, 1_000_000, 8.0)
        os.sched_setaffinity(spinner.pid, {cpu_ids[i % cpus]})
    assert block.worker_port(burners, 1_000_000).spin_yields_only
    time.sleep(0.3)  # the spinners are spinning
    with_spinners = median_round()
    # Generous (a shared, noisy machine): fair sharing would give ~3x.
    assert with_spinners < 1.8 * max(alone, job_s), (alone, with_spinners)
    controller.post(list(range(burners)), JobType.CLOSE)
    assert controller.wait(burners, timeout_s=10)[0] == _penv.WaitStatus.OK


@pytest.mark.parametrize("spin_us", [-2, 10**7])
def test_bad_spin_us(spin_us):
    block = SharedBlock([], num_rows=0, num_workers=1)
    with pytest.raises(ValueError, match="spin_us must be -1 .adaptive., 0"):
        block.controller(spin_us)


@pytest.mark.parametrize("spin_us", [-1, 0, 1000])
def test_sleeping_workers_do_not_burn_cpu(start_process, spin_us):
    num_workers = 4
    block = SharedBlock([], num_rows=0, num_workers=num_workers)
    block.controller()
    pipes = []
    for index in range(num_workers):
        parent_end, child_end = mp.Pipe()
        start_process(_workers.wait_one_job_cpu, block, index, spin_us, 1.5, child_end)
        pipes.append(parent_end)
    for parent_end in pipes:
        assert parent_end.poll(30) and parent_end.recv() == "ready"
    for parent_end in pipes:
        assert parent_end.poll(30)
        job, cpu, wall = parent_end.recv()
        assert job == int(JobType.NONE)
        assert 1.4 <= wall < 5.0
        # 1.5 s of waiting: a busy loop would use ~1 s of CPU here (2 cores).
        assert cpu < 0.15, f"a waiting worker used {cpu:.3f} s CPU (spin_us={spin_us})"


@pytest.mark.parametrize("spin_us", [-1, 1000])
def test_waiting_main_process_does_not_burn_cpu(start_process, spin_us):
    block = SharedBlock([("rec", (3,), np.int64)], num_rows=1, num_workers=1)
    controller = block.controller(spin_us)
    process, = start_job_workers(start_process, block, controller, 1)
    controller.post([0], JobType.STEP, _workers.step_arg(1, delay_us=1_000_000))
    start_cpu = time.process_time()
    start = time.monotonic()
    status, ids = controller.wait(1, timeout_s=30)
    cpu = time.process_time() - start_cpu
    assert status == _penv.WaitStatus.OK and list(ids) == [0]
    assert time.monotonic() - start >= 0.9
    assert cpu < 0.15, f"waiting main process used {cpu:.3f} s CPU"
    controller.post([0], JobType.CLOSE)
    assert controller.wait(1, timeout_s=10)[0] == _penv.WaitStatus.OK
    process.join(10)
