"""Every performance figure a user reads comes from the one full run.

The pages a user compares backends on (README.md, docs/choosing.rst,
docs/benchmarks.md, docs/training.rst) may quote a ratio ("1.22x") or a rate
("5.5k env-steps/s") only if it can be computed from the measurements in
``docs/results/training_loop.json``, and only inside the blocks
``benchmarks/training_loop.py`` generates from it: a figure typed by hand, or
left from an earlier run, fails here. A quoted figure is backed when a value computed from one run
of a results file rounds to it at the quoted precision.
A rate: the median, min or max of a list of measurements. A ratio: a value the
file states as one (a key naming a ratio; of a list, its median, min or max),
or, between two lists of measurements side by side in one run (two backends
measured together), the median, min or max of their paired ratios or the ratio
of their medians.
"""

import json
import re
import statistics
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Set, Tuple

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.scripts import load_benchmark_script

#: benchmarks/training_loop.py, which generates the pages' tables from the results
#: (its own tests: tests/bench/test_training_loop_script.py).
TRAINING_LOOP = load_benchmark_script("training_loop")
paired_ratios = TRAINING_LOOP.paired_ratios

RESULTS = REPO_ROOT / "docs" / "results"
#: The one full run behind the pages.
FULL_RUN = RESULTS / "training_loop.json"
#: The pages whose figures must come from ``FULL_RUN``.
PAGES = ("README.md", "docs/choosing.rst", "docs/benchmarks.md", "docs/training.rst")

#: "1.22x", "**1.22x**", "0.5–0.7x" (both ends); not "84x84".
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)(?:\s*[–-]\s*(\d+\.\d+))?x(?![\w])")
#: A rate: "13.4k" (a thousand env-steps/s: "5.5k (4.3k–6.3k)"), "5,456 env-steps/s".
THOUSANDS = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)k(?![\w])")
RATE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s+env-steps/s")


class Figure(NamedTuple):
    """A figure as quoted: its value and the unit of its last digit."""

    value: float
    unit: float
    text: str


def _figure(text: str, scale: float = 1.0) -> Figure:
    number = text.replace(",", "")
    decimals = len(number.split(".")[1]) if "." in number else 0
    return Figure(float(number) * scale, 10.0 ** -decimals * scale,
                  text + ("k" if scale == 1e3 else ""))


def quoted_figures(text: str) -> Tuple[List[Figure], List[Figure]]:
    """The ratios and the rates (in env-steps/s) that ``text`` quotes."""
    ratios = [_figure(number) for match in RATIO.finditer(text)
              for number in match.groups() if number]
    rates = ([_figure(match.group(1), 1e3) for match in THOUSANDS.finditer(text)]
             + [_figure(match.group(1)) for match in RATE.finditer(text)])
    return ratios, rates


def _series(node: object) -> Iterator[Dict[str, List[float]]]:
    """Each dict of ``node`` with its lists of measurements, by key; a list of
    lists (a run second by second) is a group of its own, of lists not paired."""
    if isinstance(node, dict):
        lists = {key: value for key, value in node.items() if _numbers(value)}
        if lists:
            yield lists
        for value in node.values():
            if isinstance(value, list) and value and all(_numbers(v) for v in value):
                for inner in value:
                    yield {"": inner}
            else:
                yield from _series(value)


def _numbers(value: object) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def _ratio_fields(node: object, key: str = "") -> Iterator[float]:
    """The values a results file states as ratios (under a key naming a ratio)."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from _ratio_fields(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from _ratio_fields(value, key)
    elif "ratio" in key and isinstance(node, (int, float)) and not isinstance(node, bool):
        yield float(node)


def run_values(run: object) -> Tuple[Set[float], Set[float]]:
    """What one run of a results file backs: (ratios, rates)."""
    ratios: Set[float] = set(_ratio_fields(run))
    rates: Set[float] = set()
    groups = _series(run)
    for group in groups:
        for key, values in group.items():
            median = statistics.median(values)
            (ratios if "ratio" in key else rates).update((median, min(values), max(values)))
        measured = [values for key, values in group.items() if "ratio" not in key]
        for a in measured:
            for b in measured:
                if a is not b:
                    ratios.add(statistics.median(a) / statistics.median(b))
                    if len(a) == len(b):
                        paired = paired_ratios(a, b)
                        ratios.update((statistics.median(paired), min(paired), max(paired)))
    return ratios, rates


def results_values(path: Path = FULL_RUN) -> Tuple[Set[float], Set[float]]:
    """What the results file ``path`` backs: (ratios, rates)."""
    ratios: Set[float] = set()
    rates: Set[float] = set()
    for run in json.loads(path.read_text()).values():
        run_ratios, run_rates = run_values(run)
        ratios |= run_ratios
        rates |= run_rates
    return ratios, rates


def backed(figure: Figure, values: Set[float]) -> bool:
    """Whether a value rounds to ``figure`` at its precision ("5.5k": to 100)."""
    return any(abs(value - figure.value) <= figure.unit / 2 + 1e-9 for value in values)


def unbacked(text: str, ratios: Set[float], rates: Set[float]) -> List[str]:
    """The figures of ``text`` that no results value rounds to."""
    quoted_ratios, quoted_rates = quoted_figures(text)
    return ([f"{f.text}x" for f in quoted_ratios if not backed(f, ratios)]
            + [f"{f.text} env-steps/s" for f in quoted_rates if not backed(f, rates)])


@pytest.fixture(scope="module")
def values():
    return results_values()


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_of_the_page_is_in_the_full_run(page, values):
    text = (REPO_ROOT / page).read_text()
    assert unbacked(text, *values) == [], f"{page} quotes figures the full run does not back"


def test_a_page_quoting_a_figure_absent_from_the_results_fails(values):
    launches = json.loads(FULL_RUN.read_text())["HalfCheetah-v5"]["launches"]
    rate = f"{statistics.median(launches['fast_vector']) / 1e3:.1f}k"
    ratio = f"{TRAINING_LOOP.paired_median(launches['fast_vector'], launches['gym_sync']):.2f}"
    page = (f"FastVectorEnv runs **{ratio}x** SyncVectorEnv "
            f"({rate} env-steps/s), and **9.87x** AsyncVectorEnv at 77.7k env-steps/s.")
    assert unbacked(page, *values) == ["9.87x", "77.7k env-steps/s"]


def outside_blocks(page: str, text: str) -> str:
    """``text`` without the blocks ``benchmarks/training_loop.py`` generates on ``page``."""
    for name, (block_page, _) in TRAINING_LOOP.BLOCKS.items():
        if block_page == page:
            text = TRAINING_LOOP.block_pattern(page, name).sub("", text)
    return text


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_of_the_page_is_generated_from_the_full_run(page):
    """Written by hand, a figure outlives the run it came from; generated, it changes
    with the run (``python benchmarks/training_loop.py tables``)."""
    ratios, rates = quoted_figures(outside_blocks(page, (REPO_ROOT / page).read_text()))
    assert [f.text for f in ratios + rates] == [], f"{page}: figures outside the blocks"


def test_a_figure_outside_the_generated_blocks_is_found():
    text = (REPO_ROOT / "docs/training.rst").read_text()
    assert "1.15x" not in outside_blocks("docs/training.rst", text)
    typed = outside_blocks("docs/training.rst", text + "\nIt ran 1.15x faster.\n")
    assert [f.text for f in quoted_figures(typed)[0]] == ["1.15"]


def test_a_figure_of_another_results_file_is_not_backed(values):
    """Measured apart from the full run (here: the camera frame's ratio), so not quoted
    on the pages."""
    other = json.loads((RESULTS / "proxy_frame.json").read_text())["median_ratio"]
    assert unbacked(f"{other:.4f}x", *values) == [f"{other:.4f}x"]
    assert unbacked(f"{other:.4f}x", *results_values(RESULTS / "proxy_frame.json")) == []


def test_figures_are_matched_at_their_precision(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(
        {"case": {"launches": {"fast": [2.0, 4.0, 6.0], "sync": [2.0, 2.0, 2.0]}}}))
    ratios, rates = results_values(tmp_path / "run.json")
    # fast/sync paired: 1, 2, 3 (median 2, range 1-3); sync/fast: 0.5 (paired and of
    # the medians).
    assert unbacked("2.00x and 2.0x, 0.50–2.00x, 1.00–3.00x; 4 env-steps/s, 6 env-steps/s",
                    ratios, rates) == []
    assert unbacked("2.01x, 0.50–3.50x; 4.6 env-steps/s; 5k env-steps/s", ratios, rates) == [
        "2.01x", "3.50x", "5k env-steps/s", "4.6 env-steps/s"]
