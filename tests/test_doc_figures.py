"""Every performance figure a user reads comes from a results file.

The pages a user compares backends on (README.md, docs/choosing.rst,
docs/benchmarks.md, docs/training.rst) may quote a ratio ("1.22x") or a rate
("5.5k env-steps/s") only if it can be computed from the measurements in
``docs/results/*.json``: a figure typed by hand, or left from a run whose
measurements were not kept, fails here. A quoted figure is backed when a value
computed from one run of a results file rounds to it at the quoted precision.
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

RESULTS = REPO_ROOT / "docs" / "results"
#: The pages whose figures must come from ``RESULTS``.
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


def paired_ratios(numerator: List[float], denominator: List[float]) -> List[float]:
    """The ratios of launch *i* of one backend to launch *i* of the other."""
    return [a / b for a, b in zip(numerator, denominator)]


def paired_median(numerator: List[float], denominator: List[float]) -> float:
    """The median of :func:`paired_ratios`."""
    return statistics.median(paired_ratios(numerator, denominator))


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


def results_values(directory: Path = RESULTS) -> Tuple[Set[float], Set[float]]:
    """What the results files in ``directory`` back: (ratios, rates)."""
    ratios: Set[float] = set()
    rates: Set[float] = set()
    for path in sorted(directory.glob("*.json")):
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
def test_every_figure_of_the_page_is_in_a_results_file(page, values):
    text = (REPO_ROOT / page).read_text()
    assert unbacked(text, *values) == [], f"{page} quotes figures no results file backs"


def test_a_page_quoting_a_figure_absent_from_the_results_fails(values):
    launches = json.loads((RESULTS / "training_loop.json").read_text())["HalfCheetah-v5"][
        "launches"]
    rate = f"{statistics.median(launches['fast_vector']) / 1e3:.1f}k"
    page = (f"FastVectorEnv runs **{headline_ratio('HalfCheetah-v5')}x** SyncVectorEnv "
            f"({rate} env-steps/s), and **9.87x** AsyncVectorEnv at 77.7k env-steps/s.")
    assert unbacked(page, *values) == ["9.87x", "77.7k env-steps/s"]


def test_figures_are_matched_at_their_precision(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(
        {"case": {"launches": {"fast": [2.0, 4.0, 6.0], "sync": [2.0, 2.0, 2.0]}}}))
    ratios, rates = results_values(tmp_path)
    # fast/sync paired: 1, 2, 3 (median 2, range 1-3); sync/fast: 0.5 (paired and of
    # the medians).
    assert unbacked("2.00x and 2.0x, 0.50–2.00x, 1.00–3.00x; 4 env-steps/s, 6 env-steps/s",
                    ratios, rates) == []
    assert unbacked("2.01x, 0.50–3.50x; 4.6 env-steps/s; 5k env-steps/s", ratios, rates) == [
        "2.01x", "3.50x", "5k env-steps/s", "4.6 env-steps/s"]


#: The README's headline ratios and the runs behind them, in the results file.
HEADLINES = ("HalfCheetah-v5", "Pong", "HalfCheetah-v5, one busy process")


def headline_ratio(run: str, backend: str = "fast_vector") -> str:
    """``backend`` (``FastVectorEnv``) over ``SyncVectorEnv`` in a run of the training
    loop, as quoted."""
    launches = json.loads((RESULTS / "training_loop.json").read_text())[run]["launches"]
    return f"{paired_median(launches[backend], launches['gym_sync']):.2f}"


def test_the_readme_headline_figures_are_the_paired_medians_of_the_training_loop():
    readme = (REPO_ROOT / "README.md").read_text()
    quoted = re.findall(r"\*\*(\d+\.\d\d)x\*\*", readme.split("## Install")[0])
    assert quoted == [headline_ratio(run) for run in HEADLINES]
    assert "docs/results/training_loop.json" in readme


#: The runs of training_loop.json behind the columns of docs/benchmarks.md's table:
#: CartPole, HalfCheetah, Pong; each quiet (no policy), with the policy, busy.
TABLE_CONDITIONS = {"quiet": ("none", 0), "policy": ("mlp", 0), "busy": ("mlp", 1)}
TABLE_RUNS = tuple(f"{workload}, {condition}"
                   for workload in ("CartPole-v1", "HalfCheetah-v5", "Pong")
                   for condition in TABLE_CONDITIONS)
#: The backends of the table's rows, as the runs name them, and as the rows do.
TABLE_BACKENDS = {"fast_vector": "`FastVectorEnv`", "fast_parallel": "`FastParallelEnvironment`",
                  "gym_sync": "`SyncVectorEnv`", "gym_async": "`AsyncVectorEnv`",
                  "sb3_subproc": "`SubprocVecEnv`", "envpool": "EnvPool",
                  "pufferlib_1w": "PufferLib (1 worker)"}


@pytest.mark.parametrize("backend, other", [
    (ours, other) for ours in ("fast_vector", "fast_parallel")
    for other in ("gym_sync", "gym_async", "sb3_subproc", "envpool", "pufferlib_1w")
] + [("fast_parallel", "fast_vector")])
def test_the_benchmarks_table_is_the_training_loop_results(backend, other):
    """Each cell of a row of docs/benchmarks.md's table is the paired median of its
    run, or "not measured" where the run has no such pair."""
    row = f"{TABLE_BACKENDS[backend]} / {TABLE_BACKENDS[other]}"
    page = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    line = next(line for line in page.splitlines() if line.startswith(f"| {row} |"))
    cells = [cell.strip() for cell in line.strip("|").split("|")][1:]
    runs = json.loads((RESULTS / "training_loop.json").read_text())
    expected = []
    for run in TABLE_RUNS:
        launches = runs[run]["launches"]
        expected.append(f"{paired_median(launches[backend], launches[other]):.2f}x"
                        if backend in launches and other in launches else "not measured")
    assert cells == expected


def test_the_table_runs_are_the_conditions_their_columns_name():
    """A column's run is its workload, 8 envs, and its condition: the policy
    (``none`` quiet) and the busy processes beside it."""
    runs = json.loads((RESULTS / "training_loop.json").read_text())
    for run in TABLE_RUNS:
        workload, condition = run.split(", ")
        assert (runs[run]["workload"], runs[run]["num_envs"], runs[run]["policy"],
                runs[run]["load"]) == (workload, 8, *TABLE_CONDITIONS[condition]), run
