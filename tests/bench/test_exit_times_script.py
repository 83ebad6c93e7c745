"""benchmarks/exit_times.py: how long a training script takes to exit, per ending."""

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def exit_times():
    return load_benchmark_script("exit_times")


def test_the_interpreter_alone_exits_and_is_timed(exit_times):
    assert 0 < exit_times.interpreter_exit_time("vector") < 30


def test_main_prints_one_row_per_ending_and_no_problem(exit_times, capsys):
    before = psutil.Process().children()
    assert exit_times.main(["--endings", "end", "--front-ends", "vector",
                            "--num-envs", "2", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| ending | vector |"
    assert lines[4].startswith("| (interpreter alone: imports, no env) | ")
    assert lines[5].startswith("| end | ") and lines[5].endswith(" tb |")
    assert "Problems:" not in lines
    assert psutil.Process().children() == before
