"""benchmarks/training_loop_phases.py: the forward pass and the step, timed apart."""

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def phases():
    return load_benchmark_script("training_loop_phases")


@pytest.mark.parametrize("variant", ["fast_vector+t1+spin20", "gym_sync+nopolicy"])
def test_run_variant_times_both_phases_and_closes_the_env(phases, variant):
    before = psutil.Process().children()
    stats = phases.run_variant("CartPole-v1", variant, steps=20)
    if "nopolicy" in variant:
        assert stats["forward_mean_us"] < stats["step_mean_us"]
    else:
        assert stats["forward_median_us"] > 0
    assert stats["step_median_us"] > 0 and stats["env_steps_per_s"] > 0
    assert stats["step_p90_us"] >= stats["step_median_us"]
    assert psutil.Process().children() == before


@pytest.mark.parametrize("variant, names", [
    ("fast_vector+t2", "unknown option 't2'"),
    ("async", "unknown backend 'async'"),
])
def test_a_bad_variant_is_named(phases, variant, names):
    with pytest.raises(ValueError, match=names):
        phases.run_variant("CartPole-v1", variant, steps=1)


def test_main_prints_one_row_per_variant(phases, capsys):
    assert phases.main(["--env", "CartPole-v1", "--variants", "gym_sync,gym_sync+nopolicy",
                        "--steps", "10", "--repeats", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip() for row in rows] == ["`gym_sync`", "`gym_sync+nopolicy`"]


def test_a_one_thread_variant_gives_torch_its_threads_back(phases):
    import torch

    threads = torch.get_num_threads()
    phases.run_variant("CartPole-v1", "gym_sync+t1+nopolicy", steps=5)
    assert torch.get_num_threads() == threads


def test_an_alf_env_bench_workload_is_made_by_its_name(phases):
    stats = phases.run_variant("S10", "gym_sync+nopolicy", steps=5)  # not a gymnasium id
    assert stats["env_steps_per_s"] > 0
