"""alf_env.bench.report and .plot: the paired-ratio arithmetic, the tables, the plots."""

import json
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


def rows_of(table: str) -> dict:
    """A markdown table's rows by their first cell (header and rule left out)."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    return {row[0]: row for row in cells[2:]}


def test_results_md_rate_table_has_every_backend_its_id_and_every_reference_column():
    lines = report.rate_table([CASE]).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["workload", "envs", "backend", "id", "env-steps/s (median)", "min - max",
                      "x AsyncVectorEnv", "x ceiling", "x EnvPool", "runs"]
    rows = {cells[3]: cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
    assert rows["fast_vector"][2:] == ["FastVectorEnv", "fast_vector", "8,000", "6,000 - 9,000",
                                       "2.00 (1.00 - 3.00)", "0.80 (0.50 - 0.90)",
                                       "0.50 (0.50 - 1.00)", "3"]
    assert rows["sb3_alf"][2:] == ["FastSubprocVecEnv", "sb3_alf", "skipped", "", "", "", "",
                                   "0"]
    without = report.rate_table([[r for r in CASE if r.backend != "envpool"]])
    assert "x EnvPool" not in without and "x ceiling" in without


def test_ratio_table_and_notes_name_the_backends_as_users_know_them():
    table = report.ratio_table([CASE])
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    assert header == ["workload", "envs", "FastVectorEnv / AsyncVectorEnv",
                      "FastVectorEnv / ceiling", "FastVectorEnv / EnvPool"]
    assert " 2.00 (1.00 - 3.00) | " in table
    assert report.ratio_table([[result("single", [1.0])]]) is None
    assert report.notes([CASE]) == [
        "FastSubprocVecEnv skipped on HalfCheetah-v5/8: alf_env.sb3 not available"]
    text = report.report_markdown([CASE], Plan(warmup=5, steps=None, seconds=0.5), 3,
                                  ["extra"])
    assert text.startswith("# alf_env throughput: env-steps/s, 3 interleaved repeat(s) of "
                           "0.5 s each after 5 warm-up steps")
    assert "- note: extra" in text


def test_short_rates_keep_three_significant_figures():
    assert [report.fmt_rate_short(v) for v in (974.4, 1800, 1855, 59_149, 179_000, 1_528_000,
                                               999_600, 0.5)] == [
        "974", "1.80k", "1.86k", "59.1k", "179k", "1.53M", "1.00M", "0.500"]


PLAN = Plan(warmup=10, steps=None, seconds=0.3)


def terminal(cases, repeats: int = 3) -> str:
    """What the terminal shows: the report, then the verdict (as the CLI prints them)."""
    return report.terminal_report(cases, PLAN, repeats) + "\n" + report.verdict(cases, repeats)


def verdict_of(cases, repeats: int = 3) -> str:
    """The verdict as one line (it is wrapped at 100 columns)."""
    return " ".join(report.verdict(cases, repeats).split())


SYNC_WINS = [result("fast_vector", [146_000, 150_000, 140_000], "W1", 2),
             result("gym_sync", [179_000, 181_000, 170_000], "W1", 2),
             result("gym_async", [16_000, 15_000, 17_000], "W1", 2),
             result("ceiling", [1_500_000, 1_528_000, 1_600_000], "W1", 2)]


def test_the_verdict_names_sync_vector_env_when_its_figures_are_highest():
    text = verdict_of([SYNC_WINS])
    assert text.startswith("Verdict, fastest choice per case on this machine (")
    assert ("W1 (2 envs): gymnasium's SyncVectorEnv is fastest at 170k - 181k env-steps/s, "
            "1.21x FastVectorEnv (1.21 - 1.23 repeat by repeat).") in text
    assert "Where SyncVectorEnv wins, use gymnasium's SyncVectorEnv" in text
    assert "EnvPool" not in text  # the ceiling is faster, but it is no choice
    # The terminal shows SyncVectorEnv's row above FastVectorEnv's: fastest first.
    out = terminal([SYNC_WINS])
    assert out.index("| SyncVectorEnv ") < out.index("| FastVectorEnv ")


def test_the_verdict_says_no_clear_winner_naming_both_when_the_repeats_overlap():
    case = [result("fast_vector", [56_000, 60_000, 58_000], "CartPole-v1"),
            result("gym_sync", [59_000, 61_000, 57_000], "CartPole-v1"),
            result("ceiling", [178_000, 170_000, 180_000], "CartPole-v1")]
    text = verdict_of([case])
    assert ("CartPole-v1 (8 envs): no clear winner between SyncVectorEnv at 57.0k - 61.0k and "
            "FastVectorEnv at 56.0k - 60.0k env-steps/s: their repeats overlap.") in text
    assert "fastest at" not in text and "use gymnasium's SyncVectorEnv" not in text
    # One repeat of the winner below one of the runner-up is an overlap too.
    touching = [result("fast_vector", [100.0, 104.0, 110.0]), result("gym_sync", [90.0, 95.0,
                                                                                 100.0])]
    assert "no clear winner" in verdict_of([touching])
    assert report.clear_lead([101.0, 104.0], [90.0, 100.0])
    assert not report.clear_lead([100.0, 104.0], [90.0, 100.0])
    assert not report.clear_lead([100.0], [])


def test_the_verdict_says_plainly_when_envpool_wins_and_gives_each_case_a_sentence():
    text = verdict_of([CASE, SYNC_WINS])
    assert ("HalfCheetah-v5 (8 envs): EnvPool is fastest at 9.00k - 16.0k env-steps/s, 1.50x "
            "FastVectorEnv (1.00 - 2.00 repeat by repeat)") not in text  # overlapping repeats
    assert "HalfCheetah-v5 (8 envs): no clear winner between EnvPool at 9.00k - 16.0k and " \
           "FastVectorEnv at 6.00k - 9.00k env-steps/s" in text
    clear = [result("fast_vector", [15_000, 15_500, 14_800]),
             result("envpool", [22_000, 23_000, 21_000]),
             result("ceiling", [32_000, 31_000, 33_000])]
    text = verdict_of([clear, SYNC_WINS])
    assert ("HalfCheetah-v5 (8 envs): EnvPool is fastest at 21.0k - 23.0k env-steps/s, 1.47x "
            "FastVectorEnv (1.42 - 1.48 repeat by repeat).") in text
    assert "Where EnvPool wins, it steps its own C++ version of the env" in text
    assert text.index("HalfCheetah-v5") < text.index("W1 (2 envs)")


def test_the_verdict_leaves_out_the_yardsticks_and_says_when_one_repeat_cannot_judge():
    only = [result("gym_sync", [1000.0]), result("ceiling", [2000.0]), result("single",
                                                                              [3000.0])]
    text = verdict_of([only], repeats=1)
    assert ("HalfCheetah-v5 (8 envs): gymnasium's SyncVectorEnv is the only choice measured, "
            "at 1.00k - 1.00k env-steps/s.") in text
    assert "Where SyncVectorEnv wins" not in text  # it beat nothing
    assert "One repeat each: no spread to judge the margins by" in text
    assert report.verdict([[result("ceiling", [2000.0])]], 3) == ""


def test_a_figure_above_the_ceiling_row_is_marked_as_noise_with_a_one_line_footnote():
    case = [result("fast_vector", [1_850, 1_800, 1_860], "W3"),
            result("gym_sync", [974, 980, 990], "W3"),
            result("ceiling", [1_840, 1_830, 1_990], "W3"),
            result("envpool", [5_000, 5_000, 5_000], "W3")]  # its C++ env may beat it
    out = terminal([case])
    rows = rows_of(out.split("W3 (8 envs)\n", 1)[1].split("\n\n", 1)[0])
    assert rows["FastVectorEnv"][1] == f"1.85k {report.NOISE_MARK}"
    assert rows["EnvPool"][1] == "5.00k" and rows["SyncVectorEnv"][1] == "980"
    (footnote,) = [line for line in out.splitlines() if line.startswith("Marked")]
    assert footnote == report.NOISE_NOTE and len(footnote) <= report.WIDTH
    assert "above the ceiling row" in footnote and "noise" in footnote
    full = report.report_markdown([case], PLAN, 3)
    assert f"1,850 {report.NOISE_MARK}" in full and report.NOISE_NOTE in full
    quiet = [r for r in case if r.backend != "fast_vector"]
    assert report.NOISE_NOTE not in terminal([quiet])
    assert report.NOISE_MARK not in report.terminal_report([quiet], PLAN, 3)


def test_every_line_the_terminal_shows_fits_100_columns_and_names_no_internal_id():
    from alf_env.bench.backends import BACKENDS

    big = [1_234_567.0, 1_456_789.0, 1_987_654.0]
    cases = [[result(b, [r * (i + 1) for r in big], workload=w, num_envs=n)
              for i, b in enumerate(BACKENDS)]
             for w, n in (("HalfCheetah-v5", 16), ("S1000", 8), ("CartPole-v1", 1024))]
    cases[0][3] = result("fast_os", [], "HalfCheetah-v5", 16, "error",
                         "RuntimeError: " + "a long reason " * 20)
    out = report.terminal_report(cases, PLAN, 3, ["worker processes left running after the "
                                                  "run (sent SIGTERM): [1, 2, 3]"],
                                 {"load": 2, "policy": "mlp", "torch_threads": 1})
    out += "\n" + report.verdict(cases, 3)
    too_wide = [line for line in out.splitlines() if len(line) > report.WIDTH]
    assert too_wide == []
    for backend in BACKENDS:
        name = BACKENDS[backend].name
        assert f"| {name} " in out
        if backend != name:
            assert f" {backend} " not in out and f"| {backend} " not in out
    legend = " ".join(next(block for block in out.split("\n\n")
                           if block.startswith("Reference rows: ")).split())
    assert "ceiling = one env per CPU" in legend and "plain loop (1 env) = one env" in legend
    assert "EnvPool = EnvPool's own C++ version of the env" in legend
    # The full matrix is not the terminal's: no id column, no ratio table.
    assert "| id " not in out and "Paired ratios" not in out


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


LOOP_RUNS = {
    "CartPole-v1, quiet": {"workload": "CartPole-v1", "launches": {
        "gym_sync": [3000.0, 3100.0, 2900.0], "fast_vector": [1500.0, 1600.0, 1400.0],
        "fast_parallel": [12000.0, 11000.0, 13000.0]}},
    "CartPole-v1, busy": {"workload": "CartPole-v1", "launches": {
        "fast_vector": [800.0, 700.0, 900.0]}},
    "CartPole-v1, no policy": {"workload": "CartPole-v1", "launches": {  # no condition's
        "fast_vector": [1.0, 2.0, 3.0]}},
    "Pong, policy": {"workload": "Pong", "launches": {"envpool": [50.0, 60.0, 70.0]}},
}


def test_training_loop_figure_draws_each_condition_s_medians_in_bar_order():
    fig = plot.training_loop_figure(LOOP_RUNS, "CartPole-v1")
    ax = fig.axes[0]
    heights = [round(p.get_height()) for p in ax.patches]
    # Bars in LOOP_BACKENDS' order within each condition; no policy run: no bars there.
    assert heights == [1500, 12000, 3000, 800]
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["1,500", "12.0k", "3.00k", "800"]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        plot.CONDITION_LABELS[c] for c in plot.CONDITIONS]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["FastVectorEnv", "FastParallelEnvironment", "SyncVectorEnv"]
    # The backends keep distinct colours.
    colours = {p.get_facecolor() for p in ax.patches}
    assert len(colours) == 3


def test_plot_module_draws_every_workload_of_a_results_file(tmp_path, capsys):
    results = tmp_path / "training_loop.json"
    results.write_text(json.dumps(LOOP_RUNS))
    assert plot.main([str(results), str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.glob("*.png"))
    assert written == ["training_loop_CartPole-v1.png", "training_loop_Pong.png"]
    width, height = _png_size(tmp_path / "training_loop_Pong.png")
    assert width >= 800 and height >= 450
    assert capsys.readouterr().out.split() == [str(tmp_path / name) for name in written]


def test_step_cost_plot_draws_a_panel_per_env_count_of_several_sweep_workloads(tmp_path):
    sweep = [[result(b, [rate / us, rate / us * 1.1], workload=f"S{us}", num_envs=n)
              for b, rate in (("fast_vector", 9e5), ("gym_sync", 8e5), ("ceiling", 1e6))]
             for us in (10, 100, 1000) for n in (4, 8)]
    lone = [[result("fast_vector", [5.0], workload="S30", num_envs=2)]]  # one cost: no panel
    assert plot.step_cost_counts(sweep + lone + [CASE]) == [4, 8]
    assert plot.step_cost_counts(lone + [CASE]) == []
    path = tmp_path / "step_cost.png"
    plot.plot_step_cost(sweep + lone + [CASE], str(path))
    two_panels = _png_size(path)
    plot.plot_step_cost([rs for rs in sweep if rs[0].num_envs == 8], str(path))
    assert _png_size(path)[0] < two_panels[0]  # one env count: one panel
