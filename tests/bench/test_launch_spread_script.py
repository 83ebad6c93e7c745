"""benchmarks/launch_spread.py: launches of a training loop, and every second of one."""

import json
import re

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


@pytest.mark.parametrize("backend, module", [("sb3_subproc", "stable_baselines3"),
                                             ("envpool", "envpool")])
def test_the_other_libraries_backends_run_a_launch_and_print_its_rate(
        spread, capsys, backend, module):
    pytest.importorskip(module)
    before = psutil.Process().children()
    assert spread.main(["--workload", "CartPole-v1", "--num-envs", "2", "--launches", "1",
                        "--warmup", "0.1", "--seconds", "1", "--torch-threads", "1",
                        "--backends", backend]) == 0
    text = capsys.readouterr().out
    rates = re.search(rf"^  {backend}: \[(\d+)\]$", text, re.MULTILINE)
    assert rates is not None and int(rates.group(1)) > 0, text
    assert "skipped" not in text
    assert psutil.Process().children() == before


def test_a_backend_that_cannot_run_here_is_printed_as_skipped_and_the_others_run(
        spread, capsys, tmp_path):
    out = tmp_path / "skip.json"
    assert spread.main(["--workload", "CartPole-v1", "--num-envs", "2", "--launches", "1",
                        "--warmup", "0", "--seconds", "1", "--long", "1", "--runs", "1",
                        "--policy", "none", "--backends", "fast_vector_epw4,gym_sync",
                        "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "  fast_vector_epw4: skipped (needs a multiple of 4 envs)" in text
    assert re.search(r"^  gym_sync: \[\d+\]$", text, re.MULTILINE), text
    assert "gym_sync: slowest second / median" in text
    saved = json.loads(out.read_text())
    assert saved["skipped"] == {"fast_vector_epw4": "needs a multiple of 4 envs"}
    assert set(saved["launches"]) == set(saved["long"]) == {"gym_sync"}


@pytest.mark.parametrize("backend, why", [("nope", "unknown"),
                                          ("ceiling", "times a loop of its own")])
def test_an_unknown_or_self_timed_backend_is_refused(spread, capsys, backend, why):
    with pytest.raises(SystemExit):
        spread.main(["--launches", "1", "--backends", f"gym_sync,{backend}"])
    assert f"--backends: {backend!r}: {why}" in capsys.readouterr().err
