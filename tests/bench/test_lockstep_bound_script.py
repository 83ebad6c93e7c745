"""benchmarks/lockstep_bound.py: an idealized lockstep loop against SyncVectorEnv."""

import io
import math

import numpy as np
import psutil
import pytest

from alf_env.bench.core import Actions
from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def bound():
    return load_benchmark_script("lockstep_bound")


@pytest.mark.parametrize("num_workers, worker_envs, own_envs", [(2, 2, 0), (1, 2, 2)])
def test_bare_workers_step_their_envs_as_a_plain_loop_would(bound, num_workers, worker_envs,
                                                             own_envs):
    actions = Actions.make("CartPole-v1", 4).per_env()
    children = psutil.Process().children()
    loop = bound.BareLockstep("CartPole-v1", num_workers, worker_envs, own_envs, actions,
                              cpus=None)
    try:
        assert len(psutil.Process().children()) == len(children) + num_workers
        for _ in range(30):
            loop.step()
        assert loop.own.count == 31 * own_envs  # the first step came with the start
    finally:
        loop.close()
    assert psutil.Process().children() == children
    # The trainer's share is stepped as SyncVectorEnv's loop would step those envs.
    if own_envs:
        reference = bound.Stepper("CartPole-v1", range(num_workers * worker_envs,
                                                       num_workers * worker_envs + own_envs),
                                  actions)
        for _ in range(31):
            reference.step()
        for ours, theirs in zip(loop.own.envs, reference.envs):
            np.testing.assert_array_equal(ours.unwrapped.state, theirs.unwrapped.state)
        reference.close()


def test_a_worker_that_dies_ends_the_step_with_an_error_and_nothing_is_left(bound):
    actions = Actions.make("CartPole-v1", 2).per_env()
    children = psutil.Process().children()
    loop = bound.BareLockstep("CartPole-v1", 1, 2, 0, actions, cpus=None)
    loop.procs[0].kill()
    loop.procs[0].join()
    with pytest.raises(RuntimeError, match="a worker's job ended with"):
        loop.step()
    loop.close()
    assert psutil.Process().children() == children


def test_with_a_policy_the_bound_is_the_better_bare_loop(bound):
    rates = bound.measure("CartPole-v1", 2, "mlp", repeats=2, warmup=5, seconds=0.05)
    assert set(rates) == {"gym_sync", "gym_async", "fast_vector", "bare_pinned", "bare_os",
                          "hybrid", "bound"}
    assert all(len(v) == 2 and all(math.isfinite(x) and x > 0 for x in v)
               for v in rates.values())
    for r in range(2):
        assert rates["bound"][r] == max(rates[n][r] for n in bound.BARE)


def test_main_prints_rates_and_ratios_beside_a_busy_process(bound, capsys):
    children = psutil.Process().children()
    assert bound.main(["--workload", "CartPole-v1", "--num-envs", "2", "--repeats", "1",
                       "--seconds", "0.05", "--warmup", "5", "--load", "1"]) == 0
    out = capsys.readouterr().out
    assert "load 1, policy none" in out
    assert out.count("| CartPole-v1 | ") == 3  # rates, then ratios to gym_sync and the ceiling
    assert "x ceiling" in out
    assert psutil.Process().children() == children


def test_without_a_policy_the_ceiling_is_measured_in_every_round(bound):
    children = psutil.Process().children()
    rates = bound.measure("CartPole-v1", 2, "none", repeats=2, warmup=5, seconds=0.05)
    assert len(rates["ceiling"]) == 2 and all(math.isfinite(x) and x > 0
                                               for x in rates["ceiling"])
    assert psutil.Process().children() == children  # the ceiling's processes are gone


def test_with_a_policy_there_is_no_ceiling_to_compare_with(bound):
    rates = {"gym_sync": [1.0], "fast_vector": [2.0], "bound": [3.0]}
    stream = io.StringIO()
    bound.report({"CartPole-v1": rates}, stream)
    out = stream.getvalue()
    assert "x gym_sync" in out and "x ceiling" not in out
    last_row = [line for line in out.splitlines() if line.startswith("| CartPole-v1")][-1]
    assert [cell.strip() for cell in last_row.strip("|").split("|")] == [
        "CartPole-v1", "2.00", "3.00"]


def test_an_odd_number_of_envs_is_refused_by_name(bound):
    with pytest.raises(ValueError, match="--num-envs: expected a multiple of"):
        bound.loops("CartPole-v1", 3, Actions.make("CartPole-v1", 3))


def test_alternating_blocks_time_both_loops_in_one_trainer_and_leave_nothing(bound):
    children = psutil.Process().children()
    us = bound.alternate("CartPole-v1", 2, "none", blocks=3, block=4, warmup=5)
    assert set(us) == {"fast_vector", "bare", "difference"}
    assert us["fast_vector"] > 0 and us["bare"] > 0 and math.isfinite(us["difference"])
    assert psutil.Process().children() == children


def test_main_alternate_prints_what_fast_vector_adds_to_the_bare_loop(bound, capsys):
    assert bound.main(["--alternate", "--workload", "CartPole-v1", "--num-envs", "2",
                       "--blocks", "2", "--block", "3", "--warmup", "5"]) == 0
    out = capsys.readouterr().out
    assert "fast_vector against the bare loop, alternating blocks of 3" in out
    header, _, row = [line for line in out.splitlines() if line.startswith("|")]
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "workload", "fast_vector", "bare", "difference", "bare / fast_vector"]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "CartPole-v1"
    fast, bare = float(cells[1]), float(cells[2])
    # The cells are rounded to whole µs: the printed ratio (of the unrounded
    # figures, to 2 decimals) lies between the ratios their rounding allows.
    low, high = (bare - 0.5) / (fast + 0.5), (bare + 0.5) / (fast - 0.5)
    assert low - 0.005 <= float(cells[4]) <= high + 0.005
