"""The benchmark's plots.

- ``workload_<name>.png``, one per workload: a bar per backend (median
  env-steps/s, min-max whiskers) at each env count measured, with the
  reference rows (``single``, ``ceiling``, ``envpool``) drawn as marked lines
  across the bars.
- ``throughput.png``: env-steps/s against the number of envs, for the workloads
  measured at several env counts.
- ``ratios.png``: every backend's paired ratios to the reference rows.
- ``step_cost.png``: env-steps/s against the synthetic envs' step cost (the
  sweep ``S10`` ... ``S1000``), one line per backend, the ceiling and
  ``SyncVectorEnv`` marked: where handing steps to workers starts to pay.
- ``training_loop_<workload>.png`` (:func:`plot_training_loop`, ``python -m
  alf_env.bench.plot``): the runs of ``benchmarks/launch_spread.py`` behind
  ``docs/benchmarks.md``'s table, a group of bars per condition (quiet, policy,
  busy), each bar labelled with its median.

A backend has the same colour in every figure, and no two backends share one; the
legends name the backends as users know them (``FastVectorEnv``, ``SyncVectorEnv``).
"""

import argparse
import json
import os
import platform
import statistics
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set

import numpy as np

from alf_env.bench.backends import ALIASES, BACKENDS, REFERENCES, display_name
from alf_env.bench.core import CaseResult
from alf_env.bench.report import REFERENCE_COLUMNS, paired_ratios
from alf_env.bench.workloads import SWEEP_NAMES, WORKLOADS

PLOT_TITLE = "alf_env throughput (env-steps/s vs. number of envs)"
RATIO_PLOT_TITLE = "alf_env: paired ratios to the reference rows (median, min-max)"
WORKLOAD_PLOT_TITLE = "alf_env: env-steps/s per backend"
DODGE = 0.03  # horizontal offset between backends, in log2 units of the x axis
#: Distinct colours, one per backend (matplotlib's tab20 then tab20b, as hex).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5", "#393b79",
           "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#8ca252", "#bd9e39",
           "#ad494a", "#a55194")
assert len(BACKENDS) <= len(PALETTE), "more backends than distinct colours"
#: The backends most runs show take the strongest colours (the training loop's
#: seven first: matplotlib's tab10, seven hues apart).
_FIRST = ("fast_vector", "fast", "gym_sync", "gym_async", "sb3_subproc", "envpool",
          "pufferlib_1w", "ceiling", "parallel", "pufferlib", "sb3_alf")
COLOURS = dict(zip([b for b in _FIRST if b in BACKENDS]
                   + [b for b in BACKENDS if b not in _FIRST], PALETTE))


def workload_png(workload: str, prefix: str = "workload_") -> str:
    """The file name of ``workload``'s figure (``prefix`` first)."""
    return prefix + "".join(c if c.isalnum() or c in "-_." else "_"
                            for c in workload) + ".png"


def _compact(value: float, _position: Any = None) -> str:
    """Tick label: 1.2k, 10k, 1M."""
    for limit, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:g}{suffix}"
    return f"{value:g}"


def _style(backend: str) -> Dict[str, Any]:
    alf = backend.startswith(("fast", "parallel", "sb3_alf", "ray_vector"))
    return {"color": COLOURS.get(backend, "k"), "marker": "o" if alf else "s",
            "linestyle": "-" if alf else "--"}


def _figure(panels: int, width: float, height: float) -> Any:
    # No pyplot: no global state, no GUI backend; the figure renders with Agg.
    from matplotlib.figure import Figure

    columns = min(panels, 2) or 1
    rows = -(-panels // columns) or 1
    fig = Figure(figsize=(width * columns, height * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes


def _finish(fig: Any, drawn: Dict[str, Any], title: str, path: str) -> None:
    if drawn:
        names = [b for b in BACKENDS if b in drawn]
        # Below the panels, inside the figure: constrained layout makes room for it.
        fig.legend([drawn[b] for b in names], [display_name(b) for b in names],
                   loc="outside lower center",
                   ncols=min(len(names), 5), fontsize=8)
    fig.suptitle(f"{title} - {os.cpu_count()} CPUs, {platform.machine()}")
    fig.savefig(path, format="png", dpi=100, metadata={"Title": title})


def _log_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    ax.set_yscale("log")
    low, high = ax.get_ylim()
    if high < 10 * low:  # within a decade, log ticks would leave it unlabelled
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.yaxis.set_major_formatter(FuncFormatter(_compact))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.3)


def _counts(cases: Sequence[List[CaseResult]]) -> Dict[str, Set[int]]:
    counts_of: Dict[str, Set[int]] = {}
    for results in cases:
        counts_of.setdefault(results[0].workload, set()).add(results[0].num_envs)
    return counts_of


def _lines(ax: Any, selected: Sequence[CaseResult], x_of: Callable[[CaseResult], float],
           style_of: Callable[[str], Dict[str, Any]], dodge: bool) -> Dict[str, Any]:
    """Draws a line per backend through the ``selected`` results that have runs,
    at ``x_of`` each (median, min-max bars); ``dodge`` shifts the backends apart
    on a log2 axis. Returns what it drew, by backend."""
    by_backend: Dict[str, List[CaseResult]] = {}
    for r in selected:
        if r.runs:
            by_backend.setdefault(r.backend, []).append(r)
    drawn: Dict[str, Any] = {}
    for i, (backend, rs) in enumerate(by_backend.items()):
        rs = sorted(rs, key=x_of)
        med = np.array([r.median for r in rs])
        shift = 2.0 ** (DODGE * (i - (len(by_backend) - 1) / 2)) if dodge else 1.0
        drawn[backend] = ax.errorbar(
            [x_of(r) * shift for r in rs], med,
            yerr=[med - np.array([min(r.rates) for r in rs]),
                  np.array([max(r.rates) for r in rs]) - med],
            capsize=3, markersize=4, **{"linewidth": 1.5, **style_of(backend)})
    return drawn


def scaling_workloads(cases: Sequence[List[CaseResult]]) -> List[str]:
    """The workloads measured at several env counts (those :func:`plot` draws)."""
    return [w for w, counts in _counts(cases).items() if len(counts) > 1]


def plot(cases: Sequence[List[CaseResult]], path: str) -> None:
    """Writes a PNG: env-steps/s against the number of envs, one line per backend.

    One panel per workload measured at several env counts; both axes are logarithmic; the bars
    show the min-max spread of the repeats. Backends keep their colour in every panel.

    Args:
        cases: the results, as ``run_all`` returns them.
        path: the PNG file to write.
    """
    from matplotlib.ticker import NullLocator

    workloads = scaling_workloads(cases)
    counts_of = _counts(cases)
    fig, axes = _figure(len(workloads), 6.0, 4.2)
    drawn: Dict[str, Any] = {}
    for ax, workload in zip(axes, workloads):
        # Backends side by side around each count, so their bars do not overlap.
        drawn.update(_lines(ax, [r for rs in cases for r in rs if r.workload == workload],
                            lambda r: r.num_envs, _style, dodge=True))
        workload_entry = WORKLOADS.get(workload)
        ax.set_title(workload_entry.title if workload_entry else workload, fontsize=11)
        ax.set_xscale("log", base=2)
        counts = sorted(counts_of[workload])
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.xaxis.set_minor_locator(NullLocator())
        _log_axis(ax)
        ax.set_xlabel("number of envs")
        ax.set_ylabel("env-steps/s")
    _finish(fig, drawn, PLOT_TITLE, path)


STEP_COST_TITLE = "alf_env: env-steps/s against the env's step cost"


def step_cost_counts(cases: Sequence[List[CaseResult]]) -> List[int]:
    """The env counts at which two or more sweep workloads were measured (those
    :func:`plot_step_cost` draws a panel of)."""
    counts: Dict[int, Set[str]] = {}
    for results in cases:
        if results[0].workload in SWEEP_NAMES:
            counts.setdefault(results[0].num_envs, set()).add(results[0].workload)
    return sorted(n for n, names in counts.items() if len(names) > 1)


def plot_step_cost(cases: Sequence[List[CaseResult]], path: str) -> None:
    """Writes a PNG: env-steps/s against the synthetic envs' step cost.

    One panel per env count of :func:`step_cost_counts`; both axes logarithmic;
    a line per backend (median, min-max bars), the ceiling dashed and
    ``SyncVectorEnv`` drawn heavier, so that each backend reads against the most
    Python envs can do and against stepping in the trainer's process.

    Args:
        cases: the results, as ``run_all`` returns them.
        path: the PNG file to write.
    """
    from matplotlib.ticker import NullLocator

    counts = step_cost_counts(cases)
    microseconds = {name: int(name[1:]) for name in SWEEP_NAMES}
    fig, axes = _figure(len(counts), 6.0, 4.2)
    drawn: Dict[str, Any] = {}

    def style(backend: str) -> Dict[str, Any]:
        marked: Dict[str, Dict[str, Any]] = {
            "ceiling": {"linestyle": ":", "marker": "", "linewidth": 2.2},
            "gym_sync": {"linewidth": 2.6}}
        return {**_style(backend), **marked.get(backend, {})}

    for ax, count in zip(axes, counts):
        selected = [r for rs in cases for r in rs
                    if r.workload in microseconds and r.num_envs == count]
        drawn.update(_lines(ax, selected, lambda r: microseconds[r.workload], style,
                            dodge=False))
        ticks = sorted({microseconds[r.workload] for r in selected if r.runs})
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{t} µs" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        _log_axis(ax)
        ax.set_xlabel("CPU time of one env step")
        ax.set_ylabel("env-steps/s (median, min-max)")
        ax.set_title(f"{count} envs", fontsize=11)
    _finish(fig, drawn, STEP_COST_TITLE, path)


def plot_ratios(cases: Sequence[List[CaseResult]], path: str) -> None:
    """Writes a PNG: per reference row (AsyncVectorEnv, ceiling, EnvPool), each
    backend's paired ratio to it on every case (median, min-max bars).

    Args:
        cases: the results, as ``run_all`` returns them.
        path: the PNG file to write.
    """
    measured = {r.backend for results in cases for r in results if r.runs}
    references = [(ref, column) for ref, column in REFERENCE_COLUMNS if ref in measured]
    backends = [b for b in BACKENDS if b in measured and b not in REFERENCES]
    fig, axes = _figure(max(len(references), 1), 7.0, 4.0)
    drawn: Dict[str, Any] = {}
    for ax, (ref, column) in zip(axes, references):
        shown = [rs for rs in cases if any(paired_ratios(rs, b, ref) for b in backends)]
        for i, backend in enumerate(backends):
            x, med, low, high = [], [], [], []
            for j, results in enumerate(shown):
                ratios = paired_ratios(results, backend, ref)
                if ratios:
                    x.append(j + 0.8 * (i - (len(backends) - 1) / 2) / max(len(backends), 1))
                    m = float(np.median(ratios))
                    med.append(m)
                    low.append(m - min(ratios))
                    high.append(max(ratios) - m)
            if x:
                style = dict(_style(backend), linestyle="none")
                drawn[backend] = ax.errorbar(x, med, yerr=[low, high], capsize=2,
                                             markersize=4, **style)
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_xticks(range(len(shown)), [f"{rs[0].workload}\n{rs[0].num_envs} envs"
                                          for rs in shown], fontsize=8)
        ax.set_title(f"{column}: env-steps/s / {display_name(ref)}'s, paired by repeat",
                     fontsize=11)
        ax.set_ylabel(column)
        if ax.has_data():
            _log_axis(ax)
    _finish(fig, drawn, RATIO_PLOT_TITLE, path)


def plot_workload(cases: Sequence[List[CaseResult]], workload: str, path: str) -> None:
    """Writes ``workload``'s PNG: one bar per backend at each env count measured.

    Bars are the median env-steps/s with min-max whiskers; the reference rows
    (``single``, ``ceiling``, ``envpool``) are dashed lines across the group,
    labelled at their right end, so that every bar reads against them.

    Args:
        cases: the results, as ``run_all`` returns them.
        workload: the workload to draw.
        path: the PNG file to write.
    """
    groups = [rs for rs in cases if rs[0].workload == workload]
    groups.sort(key=lambda rs: rs[0].num_envs)
    fig, axes = _figure(1, 8.0, 4.6)
    ax = axes[0]
    drawn: Dict[str, Any] = {}
    for g, results in enumerate(groups):
        bars = [r for r in results if r.runs and r.backend not in REFERENCES]
        width = 0.8 / max(len(bars), 1)
        for i, r in enumerate(bars):
            x = g + (i - (len(bars) - 1) / 2) * width
            med = r.median
            assert med is not None  # it has runs
            drawn[r.backend] = ax.bar(
                x, med, width * 0.9, color=COLOURS.get(r.backend, "k"),
                yerr=[[med - min(r.rates)], [max(r.rates) - med]], capsize=2,
                error_kw={"linewidth": 0.8})
        for r in results:
            if r.runs and r.backend in REFERENCES:
                drawn[r.backend] = ax.hlines(r.median, g - 0.45, g + 0.45,
                                             colors=COLOURS.get(r.backend, "k"),
                                             linestyles="--", linewidth=1.6)
                ax.annotate(display_name(r.backend), (g + 0.45, r.median), fontsize=7,
                            xytext=(2, 0), textcoords="offset points", va="center")
    # Room for the legend above the bars.
    _bar_axis(ax, workload, [f"{rs[0].num_envs} envs" for rs in groups], 1.35,
              "env-steps/s (median, min-max)")
    ax.set_xlim(-0.6, len(groups) - 0.4 + 0.25)
    if drawn:
        names = [b for b in BACKENDS if b in drawn]
        ax.legend([drawn[b] for b in names], [display_name(b) for b in names],
                  loc="upper left", fontsize=7,
                  ncols=2 if len(names) > 8 else 1, framealpha=0.85)
    fig.suptitle(f"{WORKLOAD_PLOT_TITLE} - {os.cpu_count()} CPUs, {platform.machine()}")
    fig.savefig(path, format="png", dpi=100,
                metadata={"Title": f"{WORKLOAD_PLOT_TITLE}: {workload}"})


def _bar_axis(ax: Any, workload: str, groups: List[str], headroom: float,
              ylabel: str) -> None:
    """A bar chart's axes: a tick per group, a linear axis from 0 with
    ``headroom`` times the tallest bar's room, the workload's title."""
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, ax.get_ylim()[1] * headroom)
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(_compact_formatter())
    ax.grid(True, axis="y", alpha=0.3)
    entry = WORKLOADS.get(workload)
    ax.set_title(entry.title if entry else workload, fontsize=11)


def _compact_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(_compact)


TRAINING_LOOP_TITLE = "alf_env: a training loop's env-steps/s per backend"
#: The conditions of the training loop's runs, in the order the figure groups them
#: (a run is named ``"<workload>, <condition>"``).
CONDITIONS = ("quiet", "policy", "busy")
#: What each condition is, under its group.
CONDITION_LABELS = {"quiet": "quiet (the step alone)", "policy": "with the policy",
                    "busy": "policy, beside a busy process"}
#: The backends of the figure, in bar order (``launch_spread.py``'s names).
LOOP_BACKENDS = ("fast_vector", "fast_parallel", "gym_sync", "gym_async", "sb3_subproc",
                 "envpool", "pufferlib_1w")


def loop_runs(runs: Mapping[str, Any], workload: str) -> List[Optional[Dict[str, List[float]]]]:
    """Each condition's launches (backend -> env-steps/s of each launch) of ``workload``,
    ``None`` for a condition with no run."""
    found = (runs.get(f"{workload}, {condition}") for condition in CONDITIONS)
    return [None if run is None else run["launches"] for run in found]


def training_loop_figure(runs: Mapping[str, Any], workload: str) -> Any:
    """The figure of ``workload``'s training-loop runs (see :func:`plot_training_loop`)."""
    conditions = loop_runs(runs, workload)
    backends = [b for b in LOOP_BACKENDS
                if any(c is not None and b in c for c in conditions)]
    fig, axes = _figure(1, 9.0, 4.6)
    ax = axes[0]
    width = 0.84 / max(len(backends), 1)
    drawn: Dict[str, Any] = {}
    for g, launches in enumerate(conditions):
        for i, backend in enumerate(backends):
            if launches is None or backend not in launches:
                continue
            rates = launches[backend]
            med = statistics.median(rates)
            bench_id = ALIASES.get(backend, backend)
            bar = ax.bar(g + (i - (len(backends) - 1) / 2) * width, med, width * 0.92,
                         color=COLOURS.get(bench_id, "k"),
                         yerr=[[med - min(rates)], [max(rates) - med]], capsize=2,
                         error_kw={"linewidth": 0.8})
            ax.bar_label(bar, [_compact_rate(med)], rotation=90, padding=3, fontsize=7)
            drawn[bench_id] = bar
    # Room for the labels above the bars.
    _bar_axis(ax, workload, [CONDITION_LABELS[c] for c in CONDITIONS], 1.2,
              "env-steps/s of 8 envs (median, min-max)")
    names = [ALIASES.get(b, b) for b in backends]  # in bar order
    fig.legend([drawn[b] for b in names if b in drawn],
               [display_name(b) for b in names if b in drawn],
               loc="outside lower center", ncols=min(len(names), 4), fontsize=8)
    fig.suptitle(f"{TRAINING_LOOP_TITLE} - {os.cpu_count()} CPUs, {platform.machine()}")
    return fig


def _compact_rate(value: float) -> str:
    """A bar's label: 32.6k, 9.46k, 1,763."""
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value / 1e3:.2f}k" if value >= 2e3 else f"{value:,.0f}"


def plot_training_loop(runs: Mapping[str, Any], workload: str, path: str) -> None:
    """Writes ``workload``'s PNG of the training loop's runs.

    A group of bars per condition (the step alone; with the policy's forward
    pass; with the policy beside a busy process), a bar per backend (median
    env-steps/s of the launches, min-max whiskers) labelled with its median,
    the backends in :data:`LOOP_BACKENDS`' order and colour.

    Args:
        runs: a ``training_loop.json`` (run name -> ``launch_spread.py``'s JSON).
        workload: the workload whose runs ``"<workload>, <condition>"`` to draw.
        path: the PNG file to write.
    """
    training_loop_figure(runs, workload).savefig(
        path, format="png", dpi=100, metadata={"Title": f"{TRAINING_LOOP_TITLE}: {workload}"})


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m alf_env.bench.plot RESULTS OUT_DIR``: draws every workload of a
    ``training_loop.json`` with runs of :data:`CONDITIONS` into ``OUT_DIR``."""
    parser = argparse.ArgumentParser(description="Draws the training loop's figures.")
    parser.add_argument("results", help="a training_loop.json")
    parser.add_argument("out_dir")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        runs = json.load(f)
    workloads = sorted({run["workload"] for name, run in runs.items()
                        if isinstance(run, dict) and name.endswith(
                            tuple(f", {c}" for c in CONDITIONS))})
    for workload in workloads:
        path = os.path.join(args.out_dir, workload_png(workload, "training_loop_"))
        plot_training_loop(runs, workload, path)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
