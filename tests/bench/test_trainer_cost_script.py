"""benchmarks/trainer_cost.py: what each front end's trainer side costs per lockstep step
over the hand-off."""

import json

import numpy as np
import psutil
import pytest

from alf_env import nest
from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def trainer_cost():
    return load_benchmark_script("trainer_cost")


@pytest.mark.parametrize("front_end", ["fast_vector", "fast_parallel"])
def test_measure_times_every_loop_and_closes_the_workers(trainer_cost, front_end):
    # 4 envs: two per worker, as the defaults give 8 (one env per worker would reset
    # ended envs in the background, and the hand-off loop posts only to idle workers).
    before = psutil.Process().children()
    figures = trainer_cost.measure("CartPole-v1", 4, blocks=2, block=5, front_end=front_end,
                                   warmup=5)
    assert set(figures) == {f"{front_end}/{loop}" for loop in trainer_cost.LOOPS}
    assert all(value > 0 for value in figures.values())
    assert psutil.Process().children() == before


def _kinds(value):
    """The type, dtype and shape of each leaf of ``value``."""
    return [(type(leaf).__name__, str(leaf.dtype), tuple(leaf.shape)) if hasattr(leaf, "dtype")
            else (type(leaf).__name__,) for leaf in nest.flatten(value)]


@pytest.mark.parametrize("front_end", ["fast_vector", "fast_parallel"])
def test_the_minimal_loop_returns_what_the_step_returns(trainer_cost, front_end):
    # The minimal loop is a lower bound of the same work: the same leaves, types,
    # dtypes and shapes as the public step's (values differ: the envs move on).
    loops = getattr(trainer_cost, f"_{front_end}_loops")("HalfCheetah-v5", 4)
    try:
        minimal, step = loops["minimal"](), loops["step"]()
        if front_end == "fast_vector":
            assert _kinds(minimal[:4]) == _kinds(step[:4]) and minimal[4] == {}
        else:
            assert type(minimal) is type(step) and _kinds(minimal) == _kinds(step)
            np.testing.assert_array_equal(minimal.env_id, step.env_id)
    finally:
        loops["close"]()


def test_main_prints_each_repeat_and_the_medians(trainer_cost, capsys, tmp_path):
    out = tmp_path / "cost.json"
    assert trainer_cost.main(["--envs", "4", "--blocks", "2", "--block", "5",
                              "--repeats", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("CartPole-v1, 4 envs, repeat") == 4
    assert "CartPole-v1, fast_vector: over the hand-off" in text
    assert "CartPole-v1, fast_parallel: over the hand-off" in text
    saved = json.loads(out.read_text())
    assert len(saved["CartPole-v1, 4 envs"]["runs"]) == 2
    assert saved["command"].startswith("python benchmarks/trainer_cost.py --envs 4")
