"""``alf-env-bench``: what a user runs and what it prints and writes."""

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

REPO_ROOT = Path(__file__).resolve().parents[1]
HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None
BACKENDS = ["fast", "gym_sync", "gym_async", "sb3_subproc"]
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
        [console_script(), "--workload", "W1", "--num-envs", str(NUM_ENVS), "--steps",
         str(STEPS), "--repeats", str(REPEATS), "--backends", ",".join(BACKENDS),
         "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    return {"proc": proc, "out": out}


def test_run_succeeds_and_prints_the_rate_table(run):
    proc = run["proc"]
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| workload | envs | backend"))
    assert "env-steps/s (median)" in header and "min - max" in header
    assert "x gym_async" in header
    rows = {cells[2]: cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines)
            if len(cells) == 7 and cells[0] == "W1"}
    assert set(rows) == set(BACKENDS)
    for name in ("fast", "gym_sync", "gym_async"):
        median, spread, ratio, runs = rows[name][3:]
        low, high = (float(x.replace(",", "")) for x in spread.split(" - "))
        assert low <= float(median.replace(",", "")) <= high and low > 0
        assert runs == str(REPEATS)
        assert re.fullmatch(r"\d+\.\d\d", ratio)
    assert rows["gym_async"][5] == "1.00"
    if not HAS_SB3:
        assert rows["sb3_subproc"][3] == "skipped"
        assert "sb3_subproc skipped on W1/2: stable-baselines3 is not installed" in proc.stdout
    # Only the target ratios whose backends both ran have a column.
    ratio_header = next(line for line in lines if "/ gym_async" in line)
    assert [c.strip() for c in ratio_header.strip("|").split("|")] == [
        "workload", "envs", "fast / gym_async"]
    assert f"wrote {run['out'] / 'results.json'}" in proc.stdout


def test_progress_bar_goes_to_stderr(run):
    total = len(BACKENDS) * REPEATS
    stderr = run["proc"].stderr
    assert re.search(rf"\[#{{24}}\] {total}/{total} \d+:\d\d", stderr), stderr
    assert "W1 n=2 fast: " in stderr and "env-steps/s" in stderr
    assert "[" not in run["proc"].stdout.split("\n", 1)[0]


def test_json_has_every_measurement(run):
    report = json.loads((run["out"] / "results.json").read_text())
    assert report["meta"]["cpus"] >= 1 and report["meta"]["args"]["steps"] == STEPS
    assert set(report["backends"]) == set(bench.BACKENDS)
    results = {r["backend"]: r for r in report["results"]}
    assert set(results) == set(BACKENDS)
    fast = results["fast"]
    assert (fast["workload"], fast["num_envs"], fast["status"]) == ("W1", NUM_ENVS, "ok")
    assert len(fast["runs"]) == REPEATS
    for m in fast["runs"]:
        assert m["env_steps"] == STEPS * NUM_ENVS and m["seconds"] > 0
        assert m["rate"] == pytest.approx(m["env_steps"] / m["seconds"])
    rates = [m["rate"] for m in fast["runs"]]
    assert fast["min"] == min(rates) and fast["max"] == max(rates)
    assert results["gym_async"]["x_gym_async"] == pytest.approx(1.0)
    if not HAS_SB3:
        assert results["sb3_subproc"]["status"] == "skipped"
        assert results["sb3_subproc"]["runs"] == []
    ratio = next(r for r in report["ratios"] if r["ratio"] == "fast/gym_async")
    assert len(ratio["paired"]) == REPEATS and ratio["median"] > 0
    assert report["files"] == {"json": "results.json", "markdown": "results.md",
                               "plot": "throughput.png"}


def test_markdown_repeats_the_tables_and_links_the_plot(run):
    text = (run["out"] / "results.md").read_text()
    assert text.startswith("# alf_env throughput")
    table = next(line for line in run["proc"].stdout.splitlines() if "| W1 " in line)
    assert table in text
    assert "![throughput](throughput.png)" in text


def test_plot_is_an_rgba_png_with_a_title(run):
    chunks = png_chunks((run["out"] / "throughput.png").read_bytes())
    kinds = [kind for kind, _ in chunks]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    width, height, bit_depth, colour_type = struct.unpack(">IIBB", chunks[0][1][:10])
    assert width >= 600 and height >= 400
    assert (bit_depth, colour_type) == (8, 6)  # 8-bit RGBA, as matplotlib's Agg writes
    texts = dict(payload.split(b"\0", 1) for kind, payload in chunks if kind == b"tEXt")
    assert texts[b"Title"].decode() == bench.PLOT_TITLE
    pixels = zlib.decompress(b"".join(p for k, p in chunks if k == b"IDAT"))
    assert len(set(pixels)) > 16, "the image is (nearly) blank"


@pytest.mark.parametrize("argv, message", [
    (["--backends", "fast,nope"], "--backends: unknown ['nope']"),
    (["--workload", "W9"], "--workload: 'W9' is neither one of W1,W2,W3,W4"),
    (["--num-envs", "2,x"], "expected comma-separated integers"),
    (["--repeats", "0"], "--repeats and --steps must be >= 1"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_quick_fills_in_only_what_was_not_given():
    args = bench.parse_args(["--quick", "--repeats", "5"])
    assert args.repeats == 5
    assert (args.workloads, args.num_envs, args.seconds) == (
        bench.QUICK["workloads"], bench.QUICK["num_envs"], bench.QUICK["seconds"])
    assert bench.cases_of(args)[0] == ("W1", 2)
    full = bench.parse_args([])
    assert full.repeats == bench.FULL["repeats"] and full.num_envs is None
    assert ("W2", 16) in bench.cases_of(full)


@pytest.mark.parametrize("command", [["-m", "alf_env"], ["benchmarks/throughput.py"]])
def test_other_entry_points_are_the_same_cli(command):
    proc = subprocess.run([sys.executable, *command, "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: alf-env-bench")
    assert "sb3_subproc" in proc.stdout and "--quick" in proc.stdout


def _doc_tables():
    spec = importlib.util.spec_from_file_location(
        "doc_tables", REPO_ROOT / "benchmarks" / "doc_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doc_tables_turn_a_run_into_the_docs_tables(run):
    proc = subprocess.run([sys.executable, "benchmarks/doc_tables.py",
                           str(run["out"] / "results.json")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| workload | envs |"))
    # Only the backends that ran, in the documented order.
    assert header == "| workload | envs | `fast` | `gym_async` | `gym_sync` | `sb3_subproc` |"
    row = next(line for line in lines if line.startswith(f"| W1 | {NUM_ENVS} |"))
    assert len(row.split("|")) == len(header.split("|"))
    # The targets are stated for other cases than this tiny run's.
    assert "| 3 | W1, 8 | `fast/gym_async` | ≥ 4 | not measured | – |" in lines


def test_doc_tables_judge_each_target_by_its_median_paired_ratio():
    doc_tables = _doc_tables()
    ratios = [{"workload": "W1", "num_envs": 8, "ratio": "fast/gym_async",
               "paired": [4.4, 3.9, 4.1]},
              {"workload": "W2", "num_envs": 8, "ratio": "fast/gym_async",
               "paired": [2.9, 3.2, 2.8, 3.5]}]
    table = doc_tables.target_table(ratios).splitlines()
    assert "| 3 | W1, 8 | `fast/gym_async` | ≥ 4 | 4.10 (3.90–4.40) | yes |" in table
    assert "| 3 | W2, 8 | `fast/gym_async` | ≥ 3 | 3.05 (2.80–3.50) | yes |" in table
    ratios[1]["paired"] = [2.9, 3.0, 2.8]
    table = doc_tables.target_table(ratios).splitlines()
    assert "| 3 | W2, 8 | `fast/gym_async` | ≥ 3 | 2.90 (2.80–3.00) | **no** |" in table
