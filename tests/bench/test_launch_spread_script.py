"""benchmarks/launch_spread.py: launches of a training loop, and every second of one."""

import json

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def spread():
    return load_benchmark_script("launch_spread")


def test_launches_interleave_the_backends_in_fresh_processes(spread):
    before = psutil.Process().children()
    rates = spread.launches("CartPole-v1", ["fast_vector", "gym_sync"], 2, 2, warmup=0.2,
                            seconds=1.0, torch_threads=1, progress=False)
    assert set(rates) == {"fast_vector", "gym_sync"}
    assert all(len(v) == 2 and all(r > 0 for r in v) for v in rates.values())
    assert psutil.Process().children() == before


def test_main_prints_the_spread_and_the_paired_ratio_and_writes_json(spread, capsys, tmp_path):
    out = tmp_path / "spread.json"
    assert spread.main(["--workload", "CartPole-v1", "--num-envs", "2", "--launches", "1",
                        "--warmup", "0.2", "--seconds", "1", "--long", "1", "--runs", "1",
                        "--torch-threads", "1", "--load", "1", "--apart",
                        "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "slowest / median" in text and "/ gym_sync, paired: " in text
    assert "slowest second / median" in text
    saved = json.loads(out.read_text())
    assert saved["load"] == 1 and saved["apart"] is True
    assert set(saved["launches"]) == {"fast_vector", "gym_sync"}
    assert len(saved["long"]["fast_vector"]) == 1  # one run of one whole second
    assert len(saved["long"]["fast_vector"][0]) == 1


def test_trees_run_each_backend_from_each_source_tree_paired_with_the_first(
        spread, capsys, tmp_path):
    from tests.support.paths import REPO_ROOT
    out = tmp_path / "trees.json"
    assert spread.main(["--workload", "CartPole-v1", "--num-envs", "2", "--launches", "1",
                        "--warmup", "0.1", "--seconds", "1", "--policy", "none",
                        "--backends", "fast_vector", "--tree", f"a={REPO_ROOT}",
                        "--tree", f"b={REPO_ROOT}", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fast_vector@b" in text and "/ fast_vector@a, paired: " in text
    saved = json.loads(out.read_text())
    assert set(saved["launches"]) == {"fast_vector@a", "fast_vector@b"}
    assert saved["policy"] == "none" and set(saved["trees"]) == {"a", "b"}


def test_a_tree_without_alf_env_is_refused(spread, tmp_path):
    with pytest.raises(SystemExit):
        spread.main(["--launches", "1", "--tree", f"x={tmp_path}"])


@pytest.mark.parametrize("backend, policy", [("fast_vector_spread", "none"),
                                             ("fast_parallel", "mlp")])
def test_the_pinned_and_the_alf_backends_run_a_launch(spread, backend, policy):
    rates = spread.launches("CartPole-v1", [backend], 1, 2, warmup=0.1,
                            seconds=1.0, torch_threads=1, progress=False, policy=policy)
    assert len(rates[backend]) == 1 and rates[backend][0] > 0
