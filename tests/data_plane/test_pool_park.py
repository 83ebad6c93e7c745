"""Tests of alf_env/data_plane/pool_park.py: a lockstep step after a torch op parks
torch's pool (no thread ended or created), a step without one does not."""

import json
import sys

import pytest

from alf_env.data_plane import pool_park
from tests.support.child_runs import run_module


@pytest.fixture(scope="module")
def loop_report():
    run = run_module("tests.data_plane.pool_park_loop_script", [], timeout=120)
    assert run.status == 0 and not run.problems(), (run.problems(), run.stderr)
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["torch_threads"] == 2
    return report


def test_a_step_neither_ends_nor_creates_the_trainers_threads(loop_report):
    # A pool released before each step was created again by the next op, on the
    # trainer's own core, and that is what held steps 30x longer
    # (docs/benchmarks.md, "The trainer's torch threads"): every step must
    # leave the trainer with the threads it had.
    threads = loop_report["threads"]
    assert len(threads[0]) >= 2  # the main thread and the pool's
    assert all(t == threads[0] for t in threads), (
        f"{sum(t != threads[0] for t in threads)} of {len(threads)} listings after a forward "
        f"pass or a step differ from the first")


def test_steps_after_a_forward_pass_park_the_pool_and_steps_alone_do_not(loop_report):
    # The first steps may pass unparked: until a park names the pool's threads,
    # their CPU time is what the kernel last brought up to date.
    assert loop_report["parked_with_policy"] >= 75
    assert loop_report["parked_alone"] == 0


def _pool_park_with(monkeypatch, pool_busy, reads=None):
    """A PoolPark on a fake clock whose pool ran (or not) through each gap; each read of
    the pool's CPU is appended to ``reads``."""
    now = [0.0]
    cpu = [0.0]

    def tick(gap):
        now[0] += gap
        cpu[0] += gap if pool_busy else 0.0

    def coarse_cpu():
        if reads is not None:
            reads.append(now[0])
        return cpu[0]
    park = pool_park.PoolPark(clock=lambda: now[0], coarse_cpu=coarse_cpu)
    return park, tick


def _steps(park, tick, gaps):
    """A step after each of ``gaps`` (seconds of the trainer's code); whether each parked."""
    parked_steps = []
    for gap in gaps:
        tick(gap)
        parked = park.before_step()
        park.after_step(parked)
        park.returned()
        parked_steps.append(parked)
    return parked_steps


@pytest.mark.parametrize("gap, busy, parks", [
    (10e-6, True, False),    # steps back to back: no forward pass between them
    (300e-6, False, False),  # the trainer's own Python, no torch op: the pool sleeps
    (300e-6, True, True),    # a forward pass: the pool spins now
])
def test_pool_park_parks_after_a_gap_in_which_the_pool_ran(monkeypatch, gap, busy, parks):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.ones(1 << 20).sum()  # the pool exists
        park, tick = _pool_park_with(monkeypatch, busy)
        park.returned()
        # The first step after a long gap parks nothing: no CPU was read at the return
        # before it (the step before had no long gap). (After a park, the pool's own
        # threads' clocks replace the fake one: the steps stop there.)
        assert _steps(park, tick, [gap, gap]) == [False, parks]
        assert park.parked_steps == int(parks)
    finally:
        torch.set_num_threads(threads)


def test_steps_back_to_back_read_no_cpu_clock(monkeypatch):
    # Each read is a system call (~0.5 µs here): a loop of steps alone, torch loaded,
    # must not pay one per step; a forward pass between steps brings the reads back.
    pytest.importorskip("torch")
    reads = []
    park, tick = _pool_park_with(monkeypatch, pool_busy=False, reads=reads)
    park.returned()
    _steps(park, tick, [10e-6] * 50)
    assert reads == []
    _steps(park, tick, [300e-6] * 3)
    assert len(reads) >= 3


def test_pool_park_never_parks_without_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    park, tick = _pool_park_with(monkeypatch, pool_busy=True)
    park.returned()
    tick(300e-6)
    assert park.before_step() is False
    park.after_step(False)
    assert park.parked_steps == 0


def test_a_loop_whose_torch_threads_share_one_cpu_is_told_to_use_fewer():
    # The slow state of a policy loop beside another session's busy process:
    # torch's two threads, spinning for each other at every op, on one core.
    run = run_module("tests.data_plane.pool_wait_script", [], timeout=120)
    assert run.status == 0 and not run.problems(), (run.problems(), run.stderr)
    assert json.loads(run.stdout.strip().splitlines()[-1])["torch_threads"] == 2
    warnings = [line for line in run.stderr.splitlines() if "waited for a CPU" in line]
    assert len(warnings) == 1, run.stderr  # once per process
    assert warnings[0].startswith("WARNING") and "torch.set_num_threads(1)" in warnings[0]


class _Delays:
    """Fake run delays (ns) per thread id; ``None``: the thread has ended."""

    def __init__(self):
        self.ns = {11: 0, 12: 0}

    def __call__(self, tid):
        return self.ns.get(tid)


@pytest.mark.parametrize("waited_s, parks, warns", [
    (0.10, 5, False),  # a quiet machine's pool thread waits 6-12% of a second
    (0.48, 5, True),   # beside another session's busy process
    (0.48, 0, False),  # no parked step in that second: no policy loop to speak of
])
def test_pool_wait_watch_reports_a_pool_short_of_cpus(waited_s, parks, warns):
    delays = _Delays()
    watch = pool_park.PoolWaitWatch(read_delay=delays)
    assert watch.due(0.0)
    assert watch.look([11, 12], parked_steps=0, now=0.0) is None  # the first look: a baseline
    assert not watch.due(0.5)  # /proc is read once a second at most
    for tid in delays.ns:
        delays.ns[tid] += int(waited_s * 1e9)
    assert watch.due(1.0)
    share = watch.look([11, 12], parked_steps=parks, now=1.0)
    assert (share is not None) is warns
    if warns:
        assert share == pytest.approx(waited_s)


def test_pool_wait_watch_starts_over_when_a_pool_thread_ends():
    delays = _Delays()
    watch = pool_park.PoolWaitWatch(read_delay=delays)
    watch.look([11, 12], parked_steps=0, now=0.0)
    del delays.ns[12]
    assert watch.look([11, 12], parked_steps=5, now=1.0) is None
    delays.ns = {21: 0, 22: 0}  # a new pool (torch.set_num_threads)
    assert watch.look([21, 22], parked_steps=6, now=2.0) is None  # a new baseline
    delays.ns = {21: 10**9, 22: 10**9}
    assert watch.look([21, 22], parked_steps=7, now=3.0) == pytest.approx(1.0)
