"""Turns an ``alf-env-bench`` ``results.json`` into the tables of docs/benchmarks.md.

Usage::

    alf-env-bench --out bench_out
    python benchmarks/doc_tables.py bench_out/results.json > tables.md

Prints two markdown tables: env-steps/s per case and backend (medians, in
thousands), and the speed targets of the issues with the measured paired
ratio (median, min-max over repeats) and whether it is met.
"""

import argparse
import json
import statistics
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

#: Columns of the rate table, in order (backends that were not run are left
#: out; a skipped or failed one shows "–").
COLUMNS = ("fast", "fast_spread", "fast_vector", "fast_vector_spread", "fast_vector_async",
           "fast_vector_epw4", "parallel", "gym_async", "gym_sync", "sb3_subproc", "single")


class Target(NamedTuple):
    """A speed target: ``num / den >= at_least`` on (workload, num_envs)."""
    issue: int
    workload: str
    num_envs: int
    num: str
    den: str
    at_least: float


TARGETS = (
    Target(3, "W1", 8, "fast", "gym_async", 4.0),
    Target(3, "W2", 8, "fast", "gym_async", 3.0),
    Target(3, "W3", 4, "fast", "single", 1.8),
    Target(3, "W3", 4, "fast_spread", "single", 1.8),
    Target(4, "W1", 8, "fast_vector_epw4", "gym_sync", 0.5),
    Target(4, "W1", 8, "fast_vector", "gym_async", 4.0),
    Target(4, "W3", 4, "fast_vector", "single", 1.8),
    Target(4, "W3", 4, "fast_vector_spread", "single", 1.8),
    Target(4, "W4", 8, "fast_vector_async", "fast_vector", 1.3),
)


def _rate(value: Optional[float]) -> str:
    if value is None:
        return "–"
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    if value >= 1000:
        return f"{value / 1000:.2f}k"
    return f"{value:,.0f}"


def rate_table(results: Sequence[dict]) -> str:
    """Markdown: median env-steps/s per (workload, num_envs) row and backend column."""
    cases: Dict[Tuple[str, int], Dict[str, Optional[float]]] = {}
    for r in results:
        row = cases.setdefault((r["workload"], r["num_envs"]), {})
        row[r["backend"]] = r["median"] if r["status"] == "ok" else None
    columns = [c for c in COLUMNS if any(c in row for row in cases.values())]
    lines = ["| workload | envs | " + " | ".join(f"`{c}`" for c in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    for (workload, num_envs), row in cases.items():
        cells = [_rate(row.get(c)) for c in columns]
        lines.append(f"| {workload} | {num_envs} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio(ratios: Sequence[dict], target: Target) -> Optional[List[float]]:
    for r in ratios:
        if (r["workload"], r["num_envs"], r["ratio"]) == (
                target.workload, target.num_envs, f"{target.num}/{target.den}"):
            return r["paired"] or None
    return None


def target_table(ratios: Sequence[dict]) -> str:
    """Markdown: each target with its measured paired ratio and whether it is met."""
    lines = ["| issue | workload, envs | ratio | target | measured: median (min–max) | met |",
             "|---|---|---|---|---|---|"]
    for t in TARGETS:
        paired = _ratio(ratios, t)
        if paired is None:
            measured, met = "not measured", "–"
        else:
            median = statistics.median(paired)
            measured = f"{median:.2f} ({min(paired):.2f}–{max(paired):.2f})"
            met = "yes" if median >= t.at_least else "**no**"
        lines.append(f"| {t.issue} | {t.workload}, {t.num_envs} | `{t.num}/{t.den}` | "
                     f"≥ {t.at_least:g} | {measured} | {met} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="results.json written by alf-env-bench --out")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        report = json.load(f)
    meta = report["meta"]
    print(f"<!-- {meta['date']}, {meta['cpus']} CPUs, alf_env {meta['alf_env']}, "
          f"torch {meta['torch']}, gymnasium {meta['gymnasium']} -->\n")
    print(rate_table(report["results"]))
    print()
    print(target_table(report["ratios"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
