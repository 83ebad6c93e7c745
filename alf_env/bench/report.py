"""The text report: the rate table with its paired ratios, the ratio table, notes."""

import os
import statistics
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from alf_env.bench.core import CaseResult, Plan

#: The backend every rate is compared with first.
BASELINE = "gym_async"
#: The rows every backend is compared with in the rate table: (backend, column).
REFERENCE_COLUMNS = ((BASELINE, f"x {BASELINE}"), ("ceiling", "x ceiling"),
                     ("envpool", "x envpool"))
#: The ratios the speed targets are stated in (docs/benchmarks.md).
RATIOS = (("fast", "gym_async"), ("fast", "single"), ("fast_spread", "single"),
          ("fast_vector", "gym_async"), ("fast_vector", "single"),
          ("fast_vector_spread", "single"), ("fast_vector_epw4", "gym_sync"),
          ("fast_vector_async", "fast_vector"), ("fast_vector", "ceiling"),
          ("fast_vector", "envpool"), ("fast_vector", "gym_sync"), ("fast", "fast_vector"),
          ("parallel", "gym_async"), ("fast_vector", "fast_vector_os"), ("fast", "fast_os"))


def paired_ratios(results: Sequence[CaseResult], num: str, den: str) -> List[float]:
    """Per-repeat ratios ``num / den`` of one case (repeat i against repeat i)."""
    by_name = {r.backend: r for r in results}
    a, b = by_name.get(num), by_name.get(den)
    if a is None or b is None or a.status != "ok" or b.status != "ok":
        return []
    return [x / y for x, y in zip(a.rates, b.rates)]


def median_or_none(values: Sequence[float]) -> Optional[float]:
    """The median, ``None`` for no values."""
    return statistics.median(values) if values else None


def ratio_summary(ratios: Sequence[float]) -> Optional[Dict[str, float]]:
    """``{"median", "min", "max"}`` of paired ratios, ``None`` for none."""
    if not ratios:
        return None
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _fmt_ratio(value: float) -> str:
    return f"{value:.2f}"


def _fmt_spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(min(values))} - {fmt(max(values))}"


def fmt_paired(ratios: Sequence[float]) -> str:
    """``median (min - max)`` of paired ratios; ``n/a`` for none."""
    if not ratios:
        return "n/a"
    median = _fmt_ratio(statistics.median(ratios))
    if len(ratios) == 1:
        return median
    return f"{median} ({_fmt_spread(ratios, _fmt_ratio)})"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table, padded so that it also reads well as plain text.

    Columns in which most non-empty cells start with a digit are right-aligned.
    """
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(header)]
    numeric = []
    for i in range(len(header)):
        cells = [row[i] for row in rows if row[i]]
        numeric.append(bool(cells) and 2 * sum(c[0].isdigit() for c in cells) >= len(cells))

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if num else c.ljust(w)
                                 for c, w, num in zip(cells, widths, numeric)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2))
                          for w, num in zip(widths, numeric)) + "|"
    return "\n".join([line(header), rule] + [line(row) for row in rows])


def _asked(cases: Sequence[List[CaseResult]]) -> set:
    return {r.backend for results in cases for r in results}


def rate_table(cases: Sequence[List[CaseResult]]) -> str:
    """Markdown: median env-steps/s, min-max, and the paired ratios to the references.

    A reference column (x gym_async, x ceiling, x envpool) is there when that
    backend was asked for.
    """
    asked = _asked(cases)
    references = [(ref, column) for ref, column in REFERENCE_COLUMNS if ref in asked]
    rows = []
    for results in cases:
        for r in results:
            median = r.median  # None without runs
            if median is not None:
                cells = [_fmt_rate(median), _fmt_spread(r.rates, _fmt_rate)]
                cells += [fmt_paired(paired_ratios(results, r.backend, ref))
                          for ref, _ in references]
            else:
                cells = ["not run" if r.status == "ok" else r.status, ""]
                cells += [""] * len(references)
            rows.append([r.workload, str(r.num_envs), r.backend] + cells + [str(len(r.runs))])
    return markdown_table(["workload", "envs", "backend", "env-steps/s (median)", "min - max"]
                          + [column for _, column in references] + ["runs"], rows)


def ratio_table(cases: Sequence[List[CaseResult]]) -> Optional[str]:
    """Markdown: median (min-max) of the paired ratios the speed targets use.

    Only the ratios of two backends that were both asked for; ``None`` if
    there is none.
    """
    asked = _asked(cases)
    ratios_asked = [(n, d) for n, d in RATIOS if n in asked and d in asked]
    if not ratios_asked:
        return None
    rows = []
    for results in cases:
        cells = [fmt_paired(paired_ratios(results, num, den)) for num, den in ratios_asked]
        rows.append([results[0].workload, str(results[0].num_envs)] + cells)
    return markdown_table(["workload", "envs"] + [f"{n} / {d}" for n, d in ratios_asked],
                          rows)


def notes(cases: Sequence[List[CaseResult]]) -> List[str]:
    """One line per skipped or failed backend (deduplicated)."""
    seen: Dict[Tuple[str, str, str], List[str]] = {}
    for results in cases:
        for r in results:
            if r.status != "ok":
                seen.setdefault((r.backend, r.status, r.note), []).append(
                    f"{r.workload}/{r.num_envs}")
    return [f"{backend} {status} on {', '.join(where)}: {note}"
            for (backend, status, note), where in seen.items()]


def conditions_line(conditions: Optional[Dict[str, Any]]) -> str:
    """What ran beside the envs, as the heading says it (``""``: nothing)."""
    if not conditions:
        return ""
    parts = []
    if conditions.get("load"):
        parts.append(f"{conditions['load']} busy process(es) beside")
    if conditions.get("policy", "none") != "none":
        parts.append(f"a torch {conditions['policy']} policy's forward pass in the loop "
                     f"({conditions.get('torch_threads', '?')} torch threads)")
    return "; " + "; ".join(parts) if parts else ""


def report_markdown(cases: Sequence[List[CaseResult]], plan: Plan, repeats: int,
                    extra_notes: Sequence[str] = (),
                    conditions: Optional[Dict[str, Any]] = None) -> str:
    """The whole text report: heading, rate table, ratio table and notes."""
    budget = f"{plan.steps} batched steps" if plan.steps else f"{plan.seconds:g} s"
    parts = [
        f"# alf_env throughput: env-steps/s, {repeats} interleaved repeat(s) of "
        f"{budget} each after {plan.warmup} warm-up steps (start-up not timed); "
        f"{os.cpu_count()} CPUs{conditions_line(conditions)}",
        rate_table(cases),
    ]
    ratios = ratio_table(cases)
    if ratios is not None:
        parts += ["Paired ratios, median (min - max) over repeats (the \"x\" columns "
                  "above are the same against the reference rows; n/a: a backend was "
                  "skipped or failed):", ratios]
    lines = [f"- note: {line}" for line in list(notes(cases)) + list(extra_notes)]
    if lines:
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
