"""``alf-env-bench --env ENV --timings`` (:mod:`alf_env.bench.timings`): a short run
on CartPole-v1 prints every env's step, the per-batch figures and how to read them."""

import pytest

from alf_env.bench import cli
from alf_env.bench import timings as bench_timings


def test_a_short_run_prints_the_breakdown(capsys):
    assert cli.main(["--env", "CartPole-v1", "--timings", "--seconds", "0.5",
                     "--num-envs", "3"]) == 0
    out = capsys.readouterr().out
    assert "FastVectorEnv of 3 x CartPole-v1" in out
    lines = out.splitlines()
    env_lines = [line for line in lines if line.startswith("env ")]
    assert [line.split()[1] for line in env_lines] == ["0", "1", "2"]
    steps = int(out.split(" random steps")[0].rsplit(", ", 1)[1])
    assert steps > 0
    # Every env stepped every timed step, and each lockstep step is a batch.
    assert all(int(line.split()[-4]) == steps for line in env_lines)
    for figure in ("batch wait", "batch straggler spread", "batch hand-off"):
        (line,) = [line for line in lines if line.startswith(figure)]
        assert int(line.split()[-4]) == steps
    assert bench_timings.HOW_TO_READ in out


def test_timings_needs_an_env(capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(["--timings"])
    assert "--timings: name the env with --env" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.parse_args(["--env", "CartPole-v1", "--timings", "--tune"])
