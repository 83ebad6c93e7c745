"""Turns an ``alf-env-bench`` ``results.json`` into the tables of docs/benchmarks.md.

Usage::

    alf-env-bench --out bench_out
    python benchmarks/doc_tables.py bench_out/results.json > tables.md

Prints markdown: env-steps/s per case and backend (medians, in thousands);
per reference row (``gym_async``, ``ceiling``, ``envpool``) every backend's
paired ratio to it (median and min–max over repeats); and the project's speed
targets with the measured paired ratio and whether it is met. Paired
ratios are computed from the runs in the JSON: repeat *i* of one backend
against repeat *i* of the other.
"""

import argparse
import json
import statistics
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

#: Columns of the tables, in order (backends that were not run are left out;
#: a skipped or failed one shows "–").
COLUMNS = ("fast", "fast_1pw", "fast_spread", "fast_os", "fast_vector", "fast_vector_1pw",
           "fast_vector_epw4", "fast_vector_spread", "fast_vector_os", "fast_vector_async",
           "parallel", "sb3_alf", "ray_vector", "gym_async", "gym_sync", "sb3_subproc",
           "pufferlib", "pufferlib_1w", "pufferlib_async", "single", "ceiling", "envpool")
#: The reference rows every backend is compared with.
REFERENCES = ("gym_sync", "gym_async", "ceiling", "envpool")
#: The real workloads (8 envs).
REAL = ("HalfCheetah-v5", "Pong", "CartPole-v1")
#: The sweep workloads with a ceiling target (30 µs per step and up).
SWEEP_TARGETED = ("S30", "S100", "S300", "S1000")


class Target(NamedTuple):
    """A speed target: ``num / den >= at_least`` on (workload, num_envs).

    ``what`` names the property it guards: ``transport`` (moving rows between
    processes), ``cores`` (using every CPU), ``uneven`` (the EnvPool-style mode
    on uneven steps), ``real`` (the real envs against the references).
    """
    what: str
    workload: str
    num_envs: int
    num: str
    den: str
    at_least: float


TARGETS = (
    Target("transport", "W1", 8, "fast", "gym_async", 4.0),
    Target("transport", "W2", 8, "fast", "gym_async", 3.0),
    Target("cores", "W3", 4, "fast", "single", 1.8),
    Target("cores", "W3", 4, "fast_spread", "single", 1.8),
    Target("transport", "W1", 8, "fast_vector_epw4", "gym_sync", 0.5),
    Target("transport", "W1", 8, "fast_vector", "gym_async", 4.0),
    Target("cores", "W3", 4, "fast_vector", "single", 1.8),
    Target("cores", "W3", 4, "fast_vector_spread", "single", 1.8),
    Target("uneven", "W4", 8, "fast_vector_async", "fast_vector", 1.3),
    Target("real", "HalfCheetah-v5", 8, "fast_vector", "ceiling", 0.85),
    Target("real", "HalfCheetah-v5", 8, "fast_vector", "envpool", 0.9),
    Target("real", "Pong", 8, "fast_vector", "ceiling", 0.9),
    Target("real", "CartPole-v1", 8, "fast_vector", "gym_sync", 1.2),
    Target("real", "CartPole-v1", 8, "fast_vector", "gym_async", 5.0),
    *(Target("real", w, 8, "fast", "fast_vector", 0.9) for w in REAL),
    *(Target("real", w, 8, "parallel", "gym_async", 1.0) for w in REAL),
    *(Target("real", w, 8, "fast_vector", "ceiling", 0.85) for w in SWEEP_TARGETED),
)

Case = Tuple[str, int]


def _cases(results: Sequence[dict]) -> Dict[Case, Dict[str, dict]]:
    """(workload, num_envs) -> backend -> its result, in the order of the run."""
    cases: Dict[Case, Dict[str, dict]] = {}
    for r in results:
        cases.setdefault((r["workload"], r["num_envs"]), {})[r["backend"]] = r
    return cases


def paired(row: Dict[str, dict], num: str, den: str) -> List[float]:
    """Per-repeat ratios ``num / den`` of one case (repeat i against repeat i)."""
    a, b = row.get(num), row.get(den)
    if not a or not b or a["status"] != "ok" or b["status"] != "ok":
        return []
    return [x["rate"] / y["rate"] for x, y in zip(a["runs"], b["runs"])]


def fmt_paired(ratios: Sequence[float]) -> str:
    """``median (min–max)``, ``–`` for none."""
    if not ratios:
        return "–"
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"


def _rate(value: Optional[float]) -> str:
    if value is None:
        return "–"
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    if value >= 1000:
        return f"{value / 1000:.2f}k"
    return f"{value:,.0f}"


def _table(cases: Dict[Case, Dict[str, dict]], columns: Sequence[str],
           cell: Callable[[Dict[str, dict], str], str]) -> str:
    lines = ["| workload | envs | " + " | ".join(f"`{c}`" for c in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    for (workload, num_envs), row in cases.items():
        lines.append(f"| {workload} | {num_envs} | "
                     + " | ".join(cell(row, c) for c in columns) + " |")
    return "\n".join(lines)


def rate_table(results: Sequence[dict]) -> str:
    """Markdown: median env-steps/s per (workload, num_envs) row and backend column."""
    cases = _cases(results)
    columns = [c for c in COLUMNS if any(c in row for row in cases.values())]
    return _table(cases, columns, lambda row, c: _rate(
        row[c]["median"] if c in row and row[c]["status"] == "ok" else None))


def reference_table(results: Sequence[dict], reference: str) -> Optional[str]:
    """Markdown: each backend's paired ratio to ``reference``, on the cases where
    the reference was measured; ``None`` if it never was."""
    cases = {case: row for case, row in _cases(results).items()
             if reference in row and row[reference]["status"] == "ok"}
    columns = [c for c in COLUMNS if c != reference
               and any(c in row for row in cases.values())]
    if not cases:
        return None
    return _table(cases, columns, lambda row, c: fmt_paired(paired(row, c, reference)))


def target_table(results: Sequence[dict]) -> str:
    """Markdown: each target with its measured paired ratio and whether it is met."""
    cases = _cases(results)
    lines = ["| guards | workload, envs | ratio | target | measured: median (min–max) | met |",
             "|---|---|---|---|---|---|"]
    for t in TARGETS:
        ratios = paired(cases.get((t.workload, t.num_envs), {}), t.num, t.den)
        if not ratios:
            measured, met = "not measured", "–"
        else:
            measured = fmt_paired(ratios)
            met = "yes" if statistics.median(ratios) >= t.at_least else "**no**"
        lines.append(f"| {t.what} | {t.workload}, {t.num_envs} | `{t.num}/{t.den}` | "
                     f"≥ {t.at_least:g} | {measured} | {met} |")
    return "\n".join(lines)


def render(report: dict) -> str:
    """All the tables of one results.json, as markdown."""
    meta = report["meta"]
    parts = [f"<!-- {meta['date']}, {meta['cpus']} CPUs, alf_env {meta['alf_env']}, "
             f"torch {meta['torch']}, gymnasium {meta['gymnasium']} -->",
             rate_table(report["results"])]
    for reference in REFERENCES:
        table = reference_table(report["results"], reference)
        if table is not None:
            parts += [f"x `{reference}` (paired ratios, median (min–max)):", table]
    parts.append(target_table(report["results"]))
    return "\n\n".join(parts) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="results.json written by alf-env-bench --out")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        report = json.load(f)
    sys.stdout.write(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
