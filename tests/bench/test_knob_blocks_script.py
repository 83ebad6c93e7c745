"""benchmarks/knob_blocks.py: one tuner knob alternated in blocks inside one env."""

import math
import multiprocessing

import pytest

from alf_env.control_plane.step_tuner import Knob
from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def blocks():
    return load_benchmark_script("knob_blocks")


def test_the_knob_alternates_in_pairs_of_blocks_once_the_tuner_has_settled(blocks, monkeypatch):
    applied = []
    original = Knob.set

    def recorded(knob, value):
        applied.append((knob.name, value))
        original(knob, value)

    monkeypatch.setattr(Knob, "set", recorded)
    result = blocks.measure("CartPole-v1", "job_wait_spin_us", num_envs=2, seconds=0.3,
                            block=4)
    assert result["values"] == ("50", "300")
    assert set(result["settled"]) >= {"job_wait_spin_us"}
    pairs = result["pairs"]
    assert pairs and all(math.isfinite(r) and r > 0 for r in pairs)
    assert result["q1"] <= result["median"] <= result["q3"]
    assert set(result["cycle_us"]) == {"50", "300"}
    # After the tuner's round, blocks go 50 300, 300 50, 50 300, ... (one set each).
    spin = [value for name, value in applied if name == "job_wait_spin_us"]
    tail = spin[-2 * len(pairs):]
    expected = [v for i in range(len(pairs)) for v in ((50, 300) if i % 2 == 0 else (300, 50))]
    assert tail == expected
    assert multiprocessing.active_children() == []


def test_a_knob_the_tuner_does_not_have_is_refused_by_name(blocks):
    with pytest.raises(ValueError, match="cannot set 'nonexistent'"):
        blocks.measure("CartPole-v1", "nonexistent", num_envs=2, seconds=0.1, block=2)
    assert multiprocessing.active_children() == []


def test_main_prints_the_ratio_and_the_settled_values(blocks, capsys):
    assert blocks.main(["--workload", "CartPole-v1", "--knob", "job_wait_spin_us",
                        "--num-envs", "2", "--seconds", "0.2", "--block", "3"]) == 0
    out = capsys.readouterr().out
    assert "job_wait_spin_us: 300 / 50 cycle" in out
    assert "settled by the tuner's first round" in out
    with pytest.raises(SystemExit):
        blocks.main(["--knob", "speed"])
