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


def _pool_park_with(monkeypatch, pool_busy):
    """A PoolPark on a fake clock whose pool ran (or not) through each gap."""
    now = [0.0]
    cpu = [0.0]

    def tick(gap):
        now[0] += gap
        cpu[0] += gap if pool_busy else 0.0
    park = pool_park.PoolPark(clock=lambda: now[0], coarse_cpu=lambda: cpu[0])
    return park, tick


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
        tick(gap)
        parked = park.before_step()
        park.after_step(parked)
        assert parked is parks
        assert park.parked_steps == int(parks)
    finally:
        torch.set_num_threads(threads)


def test_pool_park_never_parks_without_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    park, tick = _pool_park_with(monkeypatch, pool_busy=True)
    park.returned()
    tick(300e-6)
    assert park.before_step() is False
    park.after_step(False)
    assert park.parked_steps == 0
