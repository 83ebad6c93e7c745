"""benchmarks/doc_tables.py: results.json -> the tables of docs/benchmarks.md."""

import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def doc_tables():
    return load_benchmark_script("doc_tables")


def entry(workload: str, backend: str, rates, num_envs: int = 8, status: str = "ok") -> dict:
    runs = [{"env_steps": r, "seconds": 1.0, "startup_seconds": 0.1, "rate": r} for r in rates]
    out = {"workload": workload, "num_envs": num_envs, "backend": backend, "status": status,
           "note": "", "runs": runs}
    if runs:
        out["median"] = sorted(rates)[len(rates) // 2]
    return out


RESULTS = [
    entry("HalfCheetah-v5", "fast_vector", [22000, 24000, 20000]),
    entry("HalfCheetah-v5", "ceiling", [25000, 26000, 25000]),
    entry("HalfCheetah-v5", "envpool", [26000, 25000, 26000]),
    entry("HalfCheetah-v5", "fast", [12000, 12000, 12000]),
    entry("S30", "fast_vector", [50000, 51000]),
    entry("S30", "ceiling", [60000, 60000]),
    entry("W1", "fast", [88000, 78000, 82000]),
    entry("W1", "gym_async", [20000, 20000, 20000]),
    entry("W1", "sb3_alf", [], status="skipped"),
]


def test_targets_are_judged_by_the_median_of_the_paired_ratios(doc_tables):
    lines = doc_tables.target_table(RESULTS).splitlines()
    assert "| transport | W1, 8 | `fast/gym_async` | ≥ 4 | 4.10 (3.90–4.40) | yes |" in lines
    assert ("| real | HalfCheetah-v5, 8 | `fast_vector/ceiling` | ≥ 0.85 | "
            "0.88 (0.80–0.92) | yes |") in lines
    assert ("| real | HalfCheetah-v5, 8 | `fast_vector/envpool` | ≥ 0.9 | "
            "0.85 (0.77–0.96) | **no** |") in lines
    assert "| real | HalfCheetah-v5, 8 | `fast/fast_vector` | ≥ 0.9 | 0.55 (0.50–0.60) | **no** |" \
        in lines
    assert "| real | S30, 8 | `fast_vector/ceiling` | ≥ 0.85 | 0.84 (0.83–0.85) | **no** |" in lines
    assert "| real | Pong, 8 | `fast_vector/ceiling` | ≥ 0.9 | not measured | – |" in lines
    assert "| real | CartPole-v1, 8 | `parallel/gym_async` | ≥ 1 | not measured | – |" in lines


def test_every_real_env_target_is_listed(doc_tables):
    real = {(t.workload, t.num, t.den, t.at_least) for t in doc_tables.TARGETS
            if t.what == "real"}
    assert {("CartPole-v1", "fast_vector", "gym_sync", 1.2),
            ("CartPole-v1", "fast_vector", "gym_async", 5.0)} <= real
    for workload in ("HalfCheetah-v5", "Pong", "CartPole-v1"):
        assert (workload, "fast", "fast_vector", 0.9) in real
        assert (workload, "parallel", "gym_async", 1.0) in real
    assert {w for w, num, den, _ in real if w.startswith("S")} == {
        "S30", "S100", "S300", "S1000"}


def test_reference_tables_show_paired_ratios_where_the_reference_ran(doc_tables):
    table = doc_tables.reference_table(RESULTS, "ceiling").splitlines()
    assert table[0] == "| workload | envs | `fast` | `fast_vector` | `envpool` |"
    assert table[2] == ("| HalfCheetah-v5 | 8 | 0.48 (0.46–0.48) | 0.88 (0.80–0.92) "
                        "| 1.04 (0.96–1.04) |")
    assert table[3] == "| S30 | 8 | – | 0.84 (0.83–0.85) | – |"
    assert doc_tables.reference_table(RESULTS[:4], "gym_async") is None


def test_the_script_prints_every_table(doc_tables, tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": {"date": "d", "cpus": 2, "alf_env": "0.1.0",
                                         "torch": "t", "gymnasium": "g"},
                                "results": RESULTS}))
    proc = subprocess.run([sys.executable, "benchmarks/doc_tables.py", str(path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "<!-- d, 2 CPUs, alf_env 0.1.0, torch t, gymnasium g -->"
    assert ("| workload | envs | `fast` | `fast_vector` | `sb3_alf` | `gym_async` | "
            "`ceiling` | `envpool` |") in lines
    assert "| W1 | 8 | 82k | – | – | 20k | – | – |" in lines
    for reference in ("gym_async", "ceiling", "envpool"):
        assert f"x `{reference}` (paired ratios, median (min–max)):" in lines
    assert lines[-1].startswith("| real | S1000, 8 |")
