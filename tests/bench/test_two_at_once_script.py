"""benchmarks/two_at_once.py: two FastVectorEnv loops at once against one alone."""

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def two_at_once():
    return load_benchmark_script("two_at_once")


def test_measure_runs_the_loops_at_once_and_leaves_no_process(two_at_once):
    before = psutil.Process().children()
    rates = two_at_once.measure("CartPole-v1", 2, processes=2, seconds=0.2, delay_s=3.0)
    assert len(rates) == 2 and all(rate > 0 for rate in rates)
    assert psutil.Process().children() == before


def test_main_alternates_alone_and_pair_and_prints_the_ratio(two_at_once, capsys):
    assert two_at_once.main(["--env", "CartPole-v1", "--num-envs", "2", "--seconds", "0.1",
                             "--repeats", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    kinds = [line.split()[0] for line in lines[:4]]
    assert kinds == ["alone", "pair", "pair", "alone"]
    assert len(lines[1].split("+")) == 2  # the pair's two rates
    assert lines[-1].startswith("pair / alone: ")
