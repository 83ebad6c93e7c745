"""benchmarks/step_timeline.py: each step's phases, recorded in the trainer and the workers."""

import glob
import tempfile

import numpy as np
import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def timeline():
    return load_benchmark_script("step_timeline")


def test_the_phases_of_every_step_line_up_on_one_clock(timeline):
    before = psutil.Process().children()
    leftovers = set(glob.glob(f"{tempfile.gettempdir()}/alf_env_timeline_*"))
    phases = timeline.record("CartPole-v1", steps=40, policy_name=None, warmup=5)
    workers = [name.split()[0] for name in phases if name.endswith(" job")]
    assert workers and all(len(v) == 40 for v in phases.values())
    for w in workers:
        start, job = phases[f"{w} start"], phases[f"{w} job"]
        assert (start > 0).all() and (job > 0).all()
        # a worker's job lies inside the trainer's step
        assert (start + job <= phases["step"]).all()
    assert (phases["after last"] > 0).all() and (phases["straggle"] >= 0).all()
    np.testing.assert_array_less(phases["straggle"], phases["step"])
    assert psutil.Process().children() == before
    assert set(glob.glob(f"{tempfile.gettempdir()}/alf_env_timeline_*")) == leftovers


def test_main_prints_a_row_per_phase(timeline, capsys):
    timeline.main(["--workload", "CartPole-v1", "--steps", "20", "--warmup", "5",
                   "--set", "spin_us=0"])
    out = capsys.readouterr().out
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert {"step", "w0 start", "w0 job", "after last", "straggle"} <= set(rows)
    assert "w0 cpu: CPU" in out and "arguments {'spin_us': 0}" in out
