"""benchmarks/timings_cost.py: what leaving ``timings()`` on costs a step."""

import json

import psutil
import pytest

from alf_env.control_plane.step_timings import StepClock
from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def timings_cost():
    return load_benchmark_script("timings_cost")


def test_measure_steps_both_envs_and_leaves_the_clock_as_it_was(timings_cost):
    before = psutil.Process().children()
    tick, commit, period = StepClock.tick, StepClock.commit, StepClock.SAMPLE_EVERY
    figures = timings_cost.measure("CartPole-v1", 2, blocks=3, block=4, every=1, warmup=5)
    assert set(figures) == {"timed", "untimed", "difference", "cost"}
    assert figures["timed"] > 0 and figures["untimed"] > 0
    assert figures["cost"] == pytest.approx(figures["difference"] / figures["untimed"])
    assert (StepClock.tick, StepClock.commit, StepClock.SAMPLE_EVERY) == (tick, commit, period)
    assert psutil.Process().children() == before


def test_main_prints_each_repeat_and_the_median_cost(timings_cost, capsys, tmp_path):
    out = tmp_path / "cost.json"
    assert timings_cost.main(["--num-envs", "2", "--blocks", "2", "--block", "4",
                              "--repeats", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("CartPole-v1 repeat") == 2 and "cost of the timings: median" in text
    saved = json.loads(out.read_text())
    assert len(saved["runs"]) == 2 and saved["every"] == 0
