"""benchmarks/placement.py: option sets of one front end, measured interleaved."""

import os

import psutil
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def placement():
    return load_benchmark_script("placement")


@pytest.mark.parametrize("front, variants", [
    ("vector", {"os": {"batch_size": 2, "worker_cpus": None},
                "spread": {"batch_size": 2, "worker_cpus": "spread"}}),
    ("fast", {"os": {"worker_cpus": None}, "default": {}}),
    ("parallel", {"default": {}}),
])
def test_compare_measures_every_variant_each_repeat_and_closes_them(placement, front,
                                                                    variants):
    before = psutil.Process().children()
    rates = placement.compare(front, "W1", variants, num_envs=4, repeats=2, seconds=0.05)
    assert list(rates) == list(variants)
    assert all(len(values) == 2 and all(v > 0 for v in values) for values in rates.values())
    assert psutil.Process().children() == before


def test_report_gives_paired_ratios_to_the_first_variant(placement):
    text = placement.report({"a": [100.0, 200.0], "b": [150.0, 200.0]})
    a, b = text.splitlines()
    assert "x first: 1.00 (1.00-1.00)" in a
    assert "175 env-steps/s" in b and "x first: 1.25 (1.00-1.50)" in b


def test_main_names_a_bad_variants_argument(placement, capsys):
    with pytest.raises(SystemExit):
        placement.main(["--variants", "[1, 2]"])
    assert "--variants: expected a JSON object of objects" in capsys.readouterr().err


def test_an_unknown_front_is_named(placement):
    with pytest.raises(ValueError, match="--front: expected vector, fast or parallel"):
        placement.compare("ray", "W1", {"a": {}}, num_envs=2, repeats=1, seconds=0.01)


@pytest.mark.parametrize("front, default, other", [
    ("vector", os.SCHED_OTHER, "batch"), ("fast", os.SCHED_OTHER, "batch"),
    ("parallel", os.SCHED_BATCH, "other")])
def test_a_variant_sets_the_workers_scheduling_policy(placement, front, default, other,
                                                      monkeypatch):
    calls = []
    original = os.sched_setscheduler

    def record(pid, policy, param):
        calls.append((pid, policy, os.sched_getscheduler(pid)))
        original(pid, policy, param)

    monkeypatch.setattr(os, "sched_setscheduler", record)
    rates = placement.compare(front, "W1", {"switched": {"worker_policy": other},
                                            "default": {}},
                              num_envs=2, repeats=1, seconds=0.02)
    assert list(rates) == ["switched", "default"]
    # The workers started under their default policy; the variant's were switched.
    switched = [(policy, before) for _, policy, before in calls
                if policy == placement.POLICIES[other]]
    assert switched and all(before == default for _, before in switched)


def test_an_unknown_worker_policy_is_named(placement):
    with pytest.raises(ValueError, match="worker_policy: expected one of"):
        placement.compare("vector", "W1", {"a": {"worker_policy": "fifo"}}, num_envs=2,
                          repeats=1, seconds=0.01)
