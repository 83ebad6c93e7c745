"""``alf-env-bench`` (:mod:`alf_env.bench.cli`): what a user runs and what it prints and
writes."""

import importlib.util
import json
import re
import struct
import subprocess
import sys
import sysconfig
import zlib
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from alf_env import bench
from alf_env.bench import cli
from alf_env.bench import workloads as bench_workloads
from alf_env.bench.report import fmt_range
from tests.support.paths import REPO_ROOT

HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None
BACKENDS = ["fast", "gym_sync", "gym_async", "sb3_subproc", "ceiling", "envpool"]
WORKLOADS = ["W1", "CartPole-v1"]
STEPS, NUM_ENVS, REPEATS = 30, 2, 2


def console_script() -> str:
    """The installed ``alf-env-bench`` of the interpreter running the tests."""
    path = Path(sysconfig.get_path("scripts")) / "alf-env-bench"
    assert path.exists(), f"{path} is missing: reinstall with `pip install -e .`"
    return str(path)


def png_chunks(data: bytes) -> List[Tuple[bytes, bytes]]:
    """The (type, payload) chunks of a PNG file, checking every CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, payload = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + payload), f"bad CRC in chunk {kind!r}"
        chunks.append((kind, payload))
        pos += 12 + length
    return chunks


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Dict[str, object]:
    """One tiny benchmark run through the console script, as a user runs it."""
    out = tmp_path_factory.mktemp("bench") / "results"
    proc = subprocess.run(
        [console_script(), "--workload", ",".join(WORKLOADS), "--num-envs", str(NUM_ENVS),
         "--steps", str(STEPS), "--repeats", str(REPEATS), "--backends", ",".join(BACKENDS),
         "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    return {"proc": proc, "out": out}


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces (the terminal's
    paragraphs are wrapped at 100 columns)."""
    return " ".join(text.split())


def case_tables(stdout: str) -> Dict[Tuple[str, int], Tuple[List[str], Dict[str, List[str]]]]:
    """The terminal's table of each case: (workload, envs) -> (header, rows by name)."""
    tables = {}
    for block in stdout.split("\n\n"):
        lines = block.splitlines()
        heading = re.fullmatch(r"(\S+) \((\d+) envs\)", lines[0]) if lines else None
        if heading and len(lines) > 2 and lines[1].startswith("| backend "):
            cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]
            tables[(heading[1], int(heading[2]))] = (cells[0], {row[0]: row
                                                                for row in cells[2:]})
    return tables


def short_rate(text: str) -> float:
    """``1.53M``, ``59.1k``, ``974`` (a noise mark dropped) as a number."""
    text = text.split()[0]
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1], 1.0)
    return float(text.rstrip("kMG")) * scale


def md_rate_table(text: str) -> Tuple[List[str], List[List[str]]]:
    """results.md's rate table: its header and its rows."""
    tables = [[[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()]
              for block in text.split("\n\n") if block.startswith("| workload ")]
    table = next(t for t in tables if t[0][:4] == ["workload", "envs", "backend", "id"])
    return table[0], table[2:]


def verdict_paragraph(stdout: str) -> str:
    """The paragraph the output ends with."""
    return stdout.rstrip("\n").split("\n\n")[-1]


def expected_sentence(results: List[dict]) -> str:
    """What the verdict must say of one case of results.json: the fastest choice (not the
    ceiling) if its repeats all beat the runner-up's, else "no clear winner" naming both."""
    names = bench.BACKENDS
    choices = sorted((r for r in results if r["status"] == "ok" and r["runs"]
                      and r["backend"] not in ("ceiling", "single")),
                     key=lambda r: -r["median"])
    where = f"{results[0]['workload']} ({results[0]['num_envs']} envs): "
    best, second = choices[0], choices[1]
    if best["min"] > second["max"]:
        name = names[best["backend"]].name
        return where + ("gymnasium's SyncVectorEnv" if name == "SyncVectorEnv" else name) \
            + " is fastest at "
    return (f"{where}no clear winner between {names[best['backend']].name} at ")


def test_run_prints_a_short_table_per_case_fastest_first_by_the_names_users_know(run):
    proc = run["proc"]
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if len(line) > 100] == []
    tables = case_tables(proc.stdout)
    assert set(tables) == {(w, NUM_ENVS) for w in WORKLOADS}
    header, rows = tables[("W1", NUM_ENVS)]
    assert header == ["backend", "env-steps/s", "min - max", "x ceiling"]
    measured = {"FastParallelEnvironment", "SyncVectorEnv", "AsyncVectorEnv", "ceiling"}
    assert set(rows) == measured | ({"SubprocVecEnv"} if HAS_SB3 else set())
    medians = [short_rate(row[1]) for row in rows.values()]
    assert medians == sorted(medians, reverse=True)  # fastest first
    for row in rows.values():
        low, high = (short_rate(x) for x in row[2].split(" - "))
        assert 0 < low <= short_rate(row[1]) <= high
        assert re.fullmatch(r"\d+\.\d\d \(\d+\.\d\d - \d+\.\d\d\)", row[3]), row[3]
    assert rows["ceiling"][3] == "1.00 (1.00 - 1.00)"
    _, cartpole = tables[("CartPole-v1", NUM_ENVS)]
    assert "EnvPool" in cartpole
    # The internal ids are for --backends, not for the output.
    for backend in BACKENDS:
        if backend != "ceiling":
            assert f"| {backend} " not in proc.stdout
    text = one_line(proc.stdout)
    assert ("Reference rows: ceiling = one env per CPU, each in its own process in a plain loop, "
            "rates summed") in text and "EnvPool = EnvPool's own C++ version of the env" in text
    assert "- note: EnvPool skipped on W1/2: EnvPool has no version of this workload" in text
    if not HAS_SB3:
        assert "- note: SubprocVecEnv skipped on W1/2: stable-baselines3 is not installed" \
            in text
    # The full matrix is in results.md, not here: no ratio columns before the verdict (which
    # may name the runner-up, "1.20x AsyncVectorEnv").
    tables_part = proc.stdout[:proc.stdout.rindex(verdict_paragraph(proc.stdout))]
    assert "Paired ratios" not in tables_part and "x AsyncVectorEnv" not in tables_part
    assert f"Every measurement: {run['out'] / 'results.json'}" in text
    assert (f"Every backend, every figure and the paired ratios: {run['out'] / 'results.md'}"
            in text)


def test_run_ends_with_the_verdict_naming_the_fastest_choice_of_each_case(run):
    paragraph = verdict_paragraph(run["proc"].stdout)
    text = one_line(paragraph)
    assert text.startswith("Verdict, fastest choice per case on this machine (")
    report = json.loads((run["out"] / "results.json").read_text())
    assert report["verdict"] == paragraph + "\n"
    for workload in WORKLOADS:
        results = [r for r in report["results"] if r["workload"] == workload]
        assert expected_sentence(results) in text


def test_progress_bar_goes_to_stderr(run):
    total = len(BACKENDS) * REPEATS * len(WORKLOADS)
    stderr = run["proc"].stderr
    assert re.search(rf"\[#{{24}}\] {total}/{total} \d+:\d\d", stderr), stderr
    assert "W1 n=2 FastParallelEnvironment: " in stderr and "env-steps/s" in stderr
    assert "[" not in run["proc"].stdout.split("\n", 1)[0]


def test_json_has_every_measurement(run):
    report = json.loads((run["out"] / "results.json").read_text())
    assert report["meta"]["cpus"] >= 1 and report["meta"]["args"]["steps"] == STEPS
    assert report["meta"]["usable_cpus"] >= 1
    assert set(report["backends"]) == set(bench.BACKENDS)
    assert report["names"]["fast_vector_os"] == "FastVectorEnv (OS-placed)"
    assert report["names"]["gym_sync"] == "SyncVectorEnv"
    assert set(report["workloads"]) == set(bench_workloads.WORKLOADS)
    results = {r["backend"]: r for r in report["results"] if r["workload"] == "W1"}
    assert set(results) == set(BACKENDS)
    assert {r["workload"] for r in report["results"]} == set(WORKLOADS)
    fast = results["fast"]
    assert (fast["workload"], fast["num_envs"], fast["status"]) == ("W1", NUM_ENVS, "ok")
    assert len(fast["runs"]) == REPEATS
    for m in fast["runs"]:
        assert m["env_steps"] == STEPS * NUM_ENVS and m["seconds"] > 0
        assert m["rate"] == pytest.approx(m["env_steps"] / m["seconds"])
    rates = [m["rate"] for m in fast["runs"]]
    assert fast["min"] == min(rates) and fast["max"] == max(rates)
    assert results["gym_async"]["x_gym_async"] == pytest.approx(1.0)
    ceiling = [m["rate"] for m in results["ceiling"]["runs"]]
    paired = [a / b for a, b in zip(rates, ceiling)]
    assert fast["x_ceiling_spread"] == pytest.approx(
        {"median": (paired[0] + paired[1]) / 2, "min": min(paired), "max": max(paired)})
    assert fast["x_envpool"] is None and fast["x_envpool_spread"] is None
    if not HAS_SB3:
        assert results["sb3_subproc"]["status"] == "skipped"
        assert results["sb3_subproc"]["runs"] == []
    ratio = next(r for r in report["ratios"] if r["ratio"] == "fast/gym_async")
    assert len(ratio["paired"]) == REPEATS and ratio["median"] > 0
    # One count per workload: no scaling plot, a figure per workload.
    assert report["files"] == {"json": "results.json", "markdown": "results.md",
                               "ratio_plot": "ratios.png",
                               "workload_plots": {"W1": "workload_W1.png",
                                                  "CartPole-v1": "workload_CartPole-v1.png"}}


def test_results_md_has_the_full_matrix_and_links_the_plots(run):
    text = (run["out"] / "results.md").read_text()
    assert text.startswith("# alf_env throughput")
    lines = text.splitlines()
    header, rows = md_rate_table(text)
    assert header == ["workload", "envs", "backend", "id", "env-steps/s (median)", "min - max",
                      "x AsyncVectorEnv", "x ceiling", "x EnvPool", "runs"]
    rows = [row for row in rows if row[0] == "W1"]
    # Every backend asked for, the skipped ones too, by name and by id.
    assert [row[2:4] for row in rows] == [[bench.BACKENDS[b].name, b] for b in BACKENDS]
    by_id = {row[3]: row for row in rows}
    assert by_id["envpool"][4] == "skipped"
    assert by_id["gym_async"][6] == "1.00 (1.00 - 1.00)"
    assert re.fullmatch(r"[\d,]+", by_id["fast"][4]) and by_id["fast"][9] == str(REPEATS)
    ratio_header = next(line for line in lines if "/ AsyncVectorEnv" in line)
    assert [c.strip() for c in ratio_header.strip("|").split("|")] == [
        "workload", "envs", "FastParallelEnvironment / AsyncVectorEnv"]
    assert "Verdict, fastest choice per case on this machine" in text
    assert "![W1](workload_W1.png)" in text and "![ratios](ratios.png)" in text
    assert "![CartPole-v1](workload_CartPole-v1.png)" in text and "throughput.png" not in text


@pytest.mark.parametrize("name, title", [
    ("workload_W1.png", "WORKLOAD_PLOT_TITLE"), ("workload_CartPole-v1.png",
                                                "WORKLOAD_PLOT_TITLE"),
    ("ratios.png", "RATIO_PLOT_TITLE")])
def test_plots_are_rgba_pngs_with_a_title(run, name, title):
    chunks = png_chunks((run["out"] / name).read_bytes())
    kinds = [kind for kind, _ in chunks]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    width, height, bit_depth, colour_type = struct.unpack(">IIBB", chunks[0][1][:10])
    assert width >= 600 and height >= 400
    assert (bit_depth, colour_type) == (8, 6)  # 8-bit RGBA, as matplotlib's Agg writes
    texts = dict(payload.split(b"\0", 1) for kind, payload in chunks if kind == b"tEXt")
    assert texts[b"Title"].decode().startswith(getattr(bench, title))
    pixels = zlib.decompress(b"".join(p for k, p in chunks if k == b"IDAT"))
    assert len(set(pixels)) > 16, "the image is (nearly) blank"


@pytest.mark.parametrize("argv, message", [
    (["--backends", "fast,nope"], "--backends: unknown ['nope']"),
    (["--workload", "W9"], "--workload: workload 'W9' is neither one of W1,W2,W3,W4"),
    (["--num-envs", "2,x"], "expected comma-separated integers"),
    (["--repeats", "0"], "--repeats and --steps must be >= 1"),
    (["--load", "-1"], "--load: give a number of busy processes >= 0"),
    (["--torch-threads", "0"], "--torch-threads: give a thread count >= 1"),
    (["--policy", "cnn"], "--policy: invalid choice: 'cnn'"),
    (["--tune"], "--tune: name the env to tune with --env"),
    (["--env", "CartPole-v1", "--workload", "W1"], "--env: give --env or --workload"),
    (["--env", "nosuchmodule_for_alf:make"], "cannot import 'nosuchmodule_for_alf'"),
    (["--env", "CartPole-v1", "--budget-s", "0"], "--budget-s: give a number of seconds"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_quick_fills_in_only_what_was_not_given():
    args = bench.parse_args(["--quick", "--repeats", "5"])
    assert args.repeats == 5
    assert (args.workloads, args.backends, args.seconds) == (
        bench.QUICK["workloads"], bench.QUICK["backends"], bench.QUICK["seconds"])
    assert "HalfCheetah-v5" in args.workloads and "Pong" in args.workloads
    assert bench.cases_of(args)[:3] == [("W1", 2), ("W1", 8), ("W3", 8)]
    full = bench.parse_args([])
    assert full.repeats == bench.FULL["repeats"] and full.num_envs is None
    assert full.backends == list(bench.BACKENDS)
    assert ("W2", 16) in bench.cases_of(full) and ("HalfCheetah-v5", 8) in bench.cases_of(full)
    assert [w for w in full.workloads if w.startswith("S")] == list(bench_workloads.SWEEP_NAMES)


#: Seconds a measurement of --quick takes besides its timed part on the project's
#: 2-core machine: starting and closing processes, and for Pong building its 8 envs
#: (0.4 s of CPU each: 1.6 s in two workers, 3.2 s in SyncVectorEnv's process).
QUICK_START_S = {"Pong": 2.0}
START_S = 0.2
#: Python's start, the imports (torch, ALE, EnvPool) and the plots.
FIXED_S = 15.0


def test_quick_repeats_enough_and_its_arithmetic_stays_under_three_minutes():
    args = bench.parse_args(["--quick"])
    assert args.repeats >= 5  # a median of 5 is rarely moved by one noisy repeat
    cases = bench.cases_of(args)
    assert len(cases) == 6 and len(args.backends) == 6
    # EnvPool has no version of the synthetic workloads: skipped at once there.
    runs = {w: (len(args.backends) - (bench_workloads.get(w).envpool_id is None))
            * args.repeats for w, _ in cases}
    runs["W1"] *= 2  # at 2 and 8 envs
    assert sum(runs.values()) == 165
    estimate = FIXED_S + sum(n * (args.seconds + QUICK_START_S.get(w, START_S))
                             for w, n in runs.items())
    assert estimate < 180, estimate


def test_the_internal_ids_still_name_backends_for_users_scripts(capsys):
    ids = ["fast", "parallel", "fast_vector_os", "sb3_alf", "gym_sync"]
    assert bench.parse_args(["--backends", ",".join(ids)]).backends == ids
    with pytest.raises(SystemExit):
        bench.parse_args(["--help"])
    assert "  fast_vector_os      FastVectorEnv (OS-placed) (FastVectorEnv, worker_cpus=None" \
        in capsys.readouterr().out


def test_a_quick_run_of_one_tiny_workload_flags_noise_and_ends_with_the_verdict(tmp_path):
    out, markdown = tmp_path / "out", tmp_path / "report" / "full.md"
    proc = subprocess.run(
        [console_script(), "--quick", "--workload", "W1", "--num-envs", "2", "--seconds",
         "0.02", "--out", str(out), "--markdown", str(markdown)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if len(line) > 100] == []
    report = json.loads((out / cli.RESULTS_JSON).read_text())
    assert report["meta"]["args"]["repeats"] == bench.QUICK["repeats"]
    results = report["results"]
    assert {r["backend"] for r in results} == set(bench.QUICK["backends"])
    # A figure above the ceiling row, and only such a figure, is marked, with the footnote.
    [(_, rows)] = case_tables(proc.stdout).values()
    ceiling = next(r["median"] for r in results if r["backend"] == "ceiling")
    above = {bench.BACKENDS[r["backend"]].name for r in results if r["status"] == "ok"
             and r["backend"] not in ("ceiling", "envpool") and r["median"] > ceiling}
    assert {name for name, row in rows.items() if row[1].endswith(" *")} == above
    assert ("Marked *: above the ceiling row" in proc.stdout) == bool(above)
    assert one_line(verdict_paragraph(proc.stdout)).startswith(
        "Verdict, fastest choice per case on this machine (")
    assert expected_sentence(results) in one_line(verdict_paragraph(proc.stdout))
    # The full tables went where --markdown said, its plot links relative to it.
    assert not (out / cli.RESULTS_MD).exists()
    text = markdown.read_text()
    assert [row[3] for row in md_rate_table(text)[1]] == bench.QUICK["backends"]
    assert "![W1](../out/workload_W1.png)" in text
    assert f"Every backend, every figure and the paired ratios: {markdown}" in one_line(
        proc.stdout)


def test_quick_leaves_out_workloads_whose_packages_are_missing(monkeypatch):
    monkeypatch.setitem(bench_workloads.WORKLOADS, "HalfCheetah-v5",
                        bench_workloads.WORKLOADS["HalfCheetah-v5"]._replace(
                            requires=("no_such_module_for_alf_env",)))
    args = bench.parse_args(["--quick"])
    assert "HalfCheetah-v5" not in args.workloads and "Pong" in args.workloads


def test_sweep_expands_and_num_envs_applies_to_every_workload():
    args = bench.parse_args(["--workload", "W1,sweep,S30", "--num-envs", "4"])
    assert args.workloads == ["W1", *bench_workloads.SWEEP_NAMES]
    assert bench.cases_of(args) == [(w, 4) for w in args.workloads]


def test_a_workload_whose_packages_are_missing_is_reported_not_crashed_on(
        monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(bench_workloads.WORKLOADS, "Needy", bench_workloads.Workload(
        bench_workloads.WORKLOADS["W1"].make, "needs a missing package",
        requires=("no_such_module_for_alf_env",)))
    status = cli.main(["--workload", "Needy,W1", "--num-envs", "2", "--backends",
                       "gym_sync,single", "--steps", "5", "--repeats", "1",
                       "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert ("SyncVectorEnv skipped on Needy/2: not installed: no_such_module_for_alf_env "
            "(`pip install alf_env[bench]` adds this workload)") in one_line(out)
    assert "Needy (2 envs): nothing measured (see the notes)" in out
    rows = md_rate_table((tmp_path / cli.RESULTS_MD).read_text())[1]
    assert [row[2:5] for row in rows if row[0] == "Needy"] == [
        ["SyncVectorEnv", "gym_sync", "skipped"], ["plain loop (1 env)", "single", "skipped"]]
    report = json.loads((tmp_path / "results.json").read_text())
    assert [r["status"] for r in report["results"]] == ["skipped", "skipped", "ok", "ok"]
    # The only choice measured on W1 (the plain loop only measures the machine), one repeat.
    assert one_line(verdict_paragraph(out)).endswith(
        "gymnasium's SyncVectorEnv is the only choice measured, at "
        f"{fmt_range([report['results'][2]['runs'][0]['rate']])} env-steps/s. One repeat "
        "each: no spread to judge the margins by (--repeats 3 or more).")


@pytest.mark.parametrize("command", [["-m", "alf_env"], ["-m", "alf_env.bench"]])
def test_other_entry_points_are_the_same_cli(command):
    proc = subprocess.run([sys.executable, *command, "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: alf-env-bench")
    for name in ("sb3_subproc", "sb3_alf", "ray_vector", "ceiling", "envpool", "--quick",
                 "HalfCheetah-v5", "Pong", "sweep"):
        assert name in proc.stdout


def test_leftover_check_sees_workers_but_not_multiprocessing_session_helpers():
    import multiprocessing
    import time

    helper = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(0,))
    helper.start()
    helper.join()  # the forkserver keeps running, as multiprocessing intends
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    worker.start()
    try:
        assert cli.child_pids() == [worker.pid]
    finally:
        worker.kill()
        worker.join()
    assert cli.check_no_leftovers(grace_seconds=0.0) == []


def test_a_run_with_a_load_and_a_policy_says_so_and_leaves_no_process(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [console_script(), "--workload", "CartPole-v1", "--num-envs", "2", "--steps", "20",
         "--repeats", "1", "--backends", "fast_vector,gym_sync", "--load", "2",
         "--policy", "mlp", "--torch-threads", "1", "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert ("2 busy process(es) beside; a torch mlp policy's forward pass in the loop "
            "(1 torch threads)") in one_line(proc.stdout)
    meta = json.loads((out / cli.RESULTS_JSON).read_text())["meta"]
    assert meta["conditions"] == {"load": 2, "policy": "mlp", "torch_threads": 1}
    assert "worker processes left running" not in proc.stdout


def test_a_workload_at_several_env_counts_gets_the_scaling_plot(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [console_script(), "--workload", "W1", "--num-envs", "1,2", "--steps", "10",
         "--repeats", "1", "--backends", "gym_sync,single", "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    chunks = png_chunks((out / "throughput.png").read_bytes())
    texts = dict(payload.split(b"\0", 1) for kind, payload in chunks if kind == b"tEXt")
    assert texts[b"Title"].decode() == bench.PLOT_TITLE
    assert (out / "workload_W1.png").exists()


def test_every_backend_has_a_colour_of_its_own():
    from alf_env.bench.plot import COLOURS
    assert set(COLOURS) == set(bench.BACKENDS)
    assert len(set(COLOURS.values())) == len(COLOURS)


def test_a_run_of_the_sweep_writes_and_links_the_step_cost_plot(tmp_path):
    from alf_env.bench.core import CaseResult, Measurement

    def case(workload: str, backend: str, rate: float) -> CaseResult:
        return CaseResult(workload, 8, backend, "ok", "",
                          [Measurement(env_steps=int(rate), seconds=1.0, startup_seconds=0.1)])

    cases = [[case(f"S{us}", b, 1e6 / us) for b in ("fast_vector", "gym_sync", "ceiling")]
             for us in (10, 100)]
    paths = cli.write_results(str(tmp_path), cases, "# results", {}, [])
    assert paths["step_cost_plot"] == str(tmp_path / "step_cost.png")
    assert png_chunks((tmp_path / "step_cost.png").read_bytes())
    assert "![step cost](step_cost.png)" in (tmp_path / "results.md").read_text()
    assert "step_cost.png" in cli.written(paths)
    one_cost = cli.write_results(str(tmp_path / "one"), cases[:1], "# results", {}, [])
    assert "step_cost_plot" not in one_cost
