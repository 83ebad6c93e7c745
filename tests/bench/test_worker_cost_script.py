"""benchmarks/worker_cost.py: what each front end's worker costs per job over its
envs' own steps."""

import json
from typing import Any, Dict, List

import gymnasium as gym
import numpy as np
import psutil
import pytest

import alf_env.bench.workloads
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
    # That every job steps its envs (alike): the test below; timings this short
    # are too noisy to compare on a loaded machine.
    assert psutil.Process().children() == before  # all in this process


class _Recorded(gym.Wrapper):
    """Records the actions its env steps with, under the env's index."""

    def __init__(self, env: gym.Env, log: List[Any]) -> None:
        super().__init__(env)
        self._log = log

    def step(self, action: Any) -> Any:
        self._log.append(np.asarray(action).tolist())
        return self.env.step(action)


def test_every_job_steps_its_envs_with_the_bare_loops_actions(worker_cost, monkeypatch):
    logs: Dict[int, List[Any]] = {}
    make_env = alf_env.bench.workloads.make_env

    def recorded(workload: str, env_id: int = 0) -> gym.Env:
        return _Recorded(make_env(workload, env_id), logs.setdefault(env_id, []))

    monkeypatch.setattr(alf_env.bench.workloads, "make_env", recorded)
    seen = {}
    for name, maker in (("bare", worker_cost._bare_job), ("fast_vector",
                        worker_cost._fast_vector_job), ("fast_parallel",
                        worker_cost._fast_parallel_job)):
        logs.clear()
        job = maker("HalfCheetah-v5", 2)
        for _ in range(3):
            job()
        seen[name] = {env_id: log[-3:] for env_id, log in logs.items()}
    assert seen["bare"][0] != seen["bare"][1]  # each env its own actions
    assert seen["fast_vector"] == seen["bare"] == seen["fast_parallel"]


def test_main_prints_each_repeat_and_the_median_ratios(worker_cost, capsys, tmp_path):
    out = tmp_path / "cost.json"
    assert worker_cost.main(["--envs", "2", "--blocks", "2", "--block", "4",
                             "--repeats", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("CartPole-v1, 2 envs, repeat") == 2
    assert "fast_vector/bare: median" in text and "fast_parallel/bare: median" in text
    saved = json.loads(out.read_text())
    assert len(saved["runs"]) == 2 and saved["envs"] == 2
