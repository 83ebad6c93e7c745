"""alf_env.bench.report and .plot: the paired-ratio arithmetic, the tables, the plots."""

import struct

import pytest

from alf_env.bench import plot, report
from alf_env.bench.core import CaseResult, Measurement, Plan


def result(backend: str, rates, workload: str = "HalfCheetah-v5", num_envs: int = 8,
           status: str = "ok", note: str = "") -> CaseResult:
    """A result whose repeat i ran at ``rates[i]`` env-steps/s (1 s each)."""
    runs = [Measurement(env_steps=int(r), seconds=1.0, startup_seconds=0.5) for r in rates]
    return CaseResult(workload, num_envs, backend, status, note, runs)


CASE = [result("fast_vector", [8000, 9000, 6000]),
        result("gym_async", [4000, 3000, 6000]),
        result("ceiling", [10000, 10000, 12000]),
        result("envpool", [16000, 9000, 12000]),
        result("sb3_alf", [], status="skipped", note="alf_env.sb3 not available")]


def test_paired_ratios_pair_repeat_i_with_repeat_i():
    assert report.paired_ratios(CASE, "fast_vector", "gym_async") == [2.0, 3.0, 1.0]
    assert report.paired_ratios(CASE, "fast_vector", "ceiling") == pytest.approx([0.8, 0.9, 0.5])
    # Not the ratio of the medians (8000 / 10000 = 0.8): the median of the pairs.
    assert report.median_or_none(report.paired_ratios(CASE, "fast_vector", "envpool")) == 0.5
    assert report.paired_ratios(CASE, "sb3_alf", "gym_async") == []
    assert report.paired_ratios(CASE, "fast_vector", "missing") == []
    assert report.ratio_summary([2.0, 3.0, 1.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert report.ratio_summary([]) is None


def test_fmt_paired_gives_median_and_spread():
    assert report.fmt_paired([2.0, 3.0, 1.0]) == "2.00 (1.00 - 3.00)"
    assert report.fmt_paired([0.456]) == "0.46"
    assert report.fmt_paired([]) == "n/a"


def test_rate_table_has_a_column_per_reference_that_was_run():
    lines = report.rate_table([CASE]).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["workload", "envs", "backend", "env-steps/s (median)", "min - max",
                      "x gym_async", "x ceiling", "x envpool", "runs"]
    rows = {cells[2]: cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
    assert rows["fast_vector"][3:] == ["8,000", "6,000 - 9,000", "2.00 (1.00 - 3.00)",
                                       "0.80 (0.50 - 0.90)", "0.50 (0.50 - 1.00)", "3"]
    assert rows["sb3_alf"][3:] == ["skipped", "", "", "", "", "0"]
    without = report.rate_table([[r for r in CASE if r.backend != "envpool"]])
    assert "x envpool" not in without and "x ceiling" in without


def test_ratio_table_and_notes():
    table = report.ratio_table([CASE])
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    assert header == ["workload", "envs", "fast_vector / gym_async", "fast_vector / ceiling",
                      "fast_vector / envpool"]
    assert " 2.00 (1.00 - 3.00) | " in table
    assert report.ratio_table([[result("single", [1.0])]]) is None
    assert report.notes([CASE]) == [
        "sb3_alf skipped on HalfCheetah-v5/8: alf_env.sb3 not available"]
    text = report.report_markdown([CASE], Plan(warmup=5, steps=None, seconds=0.5), 3,
                                  ["extra"])
    assert text.startswith("# alf_env throughput: env-steps/s, 3 interleaved repeat(s) of "
                           "0.5 s each after 5 warm-up steps")
    assert "- note: extra" in text


def _png_size(path) -> tuple:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_ratio_plot_draws_a_panel_per_reference(tmp_path):
    sweep = [[result(b, rates, workload=f"S{us}") for b, rates in
              (("fast_vector", [900, 950]), ("ceiling", [1000, 1000]))] for us in (10, 100)]
    path = tmp_path / "ratios.png"
    plot.plot_ratios([CASE] + sweep, str(path))
    width, height = _png_size(path)
    assert width >= 1000 and height >= 700  # 3 panels: two columns, two rows


def test_throughput_plot_keeps_workloads_with_several_env_counts(tmp_path):
    cases = [[result("fast", [100.0 * n, 110.0 * n], workload="W1", num_envs=n)]
             for n in (2, 8)] + [CASE]
    path = tmp_path / "throughput.png"
    plot.plot(cases, str(path))
    one_panel = _png_size(path)
    assert plot.scaling_workloads(cases) == ["W1"]
    pong = [[result("fast", [5.0 * n], workload="Pong", num_envs=n)] for n in (2, 8)]
    plot.plot(cases + pong, str(path))
    assert _png_size(path)[0] > one_panel[0]  # two workloads with several counts: 2 panels
