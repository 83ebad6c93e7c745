"""benchmarks/step_timeline.py: where a lockstep step of FastVectorEnv spends its time,
quiet, beside a busy process and with a policy."""

import json
import math

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def step_timeline():
    return load_benchmark_script("step_timeline")


def _left_behind(before):
    after = psutil.Process().children(recursive=True)
    return [p for p in after if p not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("condition", ["quiet", "busy"])
def test_a_step_without_a_policy_is_timed_and_parks_nothing(step_timeline, condition):
    before = psutil.Process().children(recursive=True)
    figures = step_timeline.measure("CartPole-v1", condition, seconds=0.3, warmup=20)
    assert figures["steps"] > 10
    for name in step_timeline.FIGURES[:-2]:
        assert figures[name] >= 0 and math.isfinite(figures[name]), name
    # The wait holds the hand-off and the slower worker's 4 env steps.
    assert figures["wait p50"] > figures["hand-off p50"]
    assert figures["step p99"] >= figures["step p50"] > 0
    assert figures["park p50"] is None and figures["release p50"] is None
    assert not _left_behind(before)  # the workers and the busy loop ended


def test_with_the_policy_the_park_and_release_are_timed(step_timeline):
    pytest.importorskip("torch")
    figures = step_timeline.measure("CartPole-v1", "policy", seconds=0.5, warmup=200)
    assert figures["park p50"] > 0 and figures["release p50"] > 0


def test_an_unknown_condition_is_refused_by_name(step_timeline):
    with pytest.raises(ValueError, match="quiet, busy, policy.*'loud'"):
        step_timeline.measure("CartPole-v1", "loud", seconds=0.1, warmup=1)


def test_main_runs_each_condition_in_turn_and_writes_every_round(step_timeline, capsys,
                                                                tmp_path):
    out = tmp_path / "timeline.json"
    assert step_timeline.main(["--workload", "CartPole-v1", "--seconds", "0.2", "--warmup",
                               "20", "--repeats", "2", "--json", str(out)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("CartPole")]
    assert [line.split(",")[1].strip() for line in lines] == ["quiet", "busy", "policy"] * 2
    assert "park p50 -" in lines[0]  # no policy: nothing parked
    saved = json.loads(out.read_text())
    assert saved["command"].startswith("python benchmarks/step_timeline.py --workload")
    for condition in step_timeline.CONDITIONS:
        rounds = saved[f"CartPole-v1, {condition}"]
        assert len(rounds) == 2
        assert set(rounds[0]) == set(step_timeline.FIGURES) | {"steps"}
