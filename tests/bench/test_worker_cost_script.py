"""benchmarks/worker_cost.py: what each front end's worker costs per job over its
envs' own steps."""

import json

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def worker_cost():
    return load_benchmark_script("worker_cost")


@pytest.mark.parametrize("workload", ["CartPole-v1", "S10"])  # S10: a 4-key info each step
def test_measure_times_every_job_and_pairs_the_ratios(worker_cost, workload):
    before = psutil.Process().children()
    figures = worker_cost.measure(workload, 2, blocks=3, block=4, warmup=5)
    assert set(figures) == {"bare", "fast_vector", "fast_parallel", "fast_vector/bare",
                            "fast_parallel/bare"}
    assert all(value > 0 for value in figures.values())
    # Every front end's worker runs the envs' steps and more.
    assert figures["fast_parallel"] > 0.5 * figures["bare"]
    assert psutil.Process().children() == before  # all in this process


def test_main_prints_each_repeat_and_the_median_ratios(worker_cost, capsys, tmp_path):
    out = tmp_path / "cost.json"
    assert worker_cost.main(["--envs", "2", "--blocks", "2", "--block", "4",
                             "--repeats", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("CartPole-v1, 2 envs, repeat") == 2
    assert "fast_vector/bare: median" in text and "fast_parallel/bare: median" in text
    saved = json.loads(out.read_text())
    assert len(saved["runs"]) == 2 and saved["envs"] == 2
