"""The text reports: the terminal's short tables and verdict, ``results.md``'s full tables.

- The terminal (:func:`terminal_report`, then :func:`verdict`): per case, the backends
  measured, fastest first, by the names users know them by, with the median, the min-max
  of the repeats and the paired ratio to the ceiling; a legend of the reference rows; a
  marker on a figure above the ceiling row (noise: no vector env of these Python envs can
  beat it); the notes; and the paragraph naming the fastest choice per case. Every line
  fits :data:`WIDTH` columns, so the report reads in a terminal and in a CI log.
- ``results.md`` (:func:`report_markdown`): every backend (skipped ones too, with the id
  ``--backends`` takes), every figure, the paired ratios to every reference row, the
  ratio table the speed targets are stated in, the notes and the same verdict.

A *clear winner* is one whose every repeat was faster than every repeat of the runner-up
(:func:`clear_lead`): with the machine's drift, overlapping repeats do not say which of two
is faster, and the verdict then says "no clear winner" and names both.
"""

import os
import statistics
import textwrap
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from alf_env.bench.backends import REFERENCES, YARDSTICKS, display_name
from alf_env.bench.core import CaseResult, Plan

#: Columns every line of the terminal report fits in.
WIDTH = 100
#: The backend every rate is compared with first.
BASELINE = "gym_async"
#: The rows every backend is compared with in results.md's rate table: (backend, column).
REFERENCE_COLUMNS = tuple((ref, f"x {display_name(ref)}")
                          for ref in (BASELINE, "ceiling", "envpool"))
#: The ratios the speed targets are stated in (results.md's ratio table).
RATIOS = (("fast", "gym_async"), ("fast", "single"), ("fast_spread", "single"),
          ("fast_vector", "gym_async"), ("fast_vector", "single"),
          ("fast_vector_spread", "single"), ("fast_vector_epw4", "gym_sync"),
          ("fast_vector_async", "fast_vector"), ("fast_vector", "ceiling"),
          ("fast_vector", "envpool"), ("fast_vector", "gym_sync"), ("fast", "fast_vector"),
          ("parallel", "gym_async"), ("fast_vector", "fast_vector_os"), ("fast", "fast_os"))
#: The row no vector env of the workload's Python envs can beat on this machine.
CEILING = "ceiling"
#: Rows a figure above the ceiling is no noise for: the ceiling itself, and EnvPool,
#: which steps its own C++ version of the env.
ABOVE_CEILING_POSSIBLE = (CEILING, "envpool")
#: The marker on a figure above the ceiling row, and the footnote that explains it.
NOISE_MARK = "*"
NOISE_NOTE = (f"Marked {NOISE_MARK}: above the ceiling row, which no vector env of these "
              "Python envs can beat: noise.")
#: What each reference row is, for the legend.
LEGEND = {
    "ceiling": "ceiling = one env per CPU, each in its own process in a plain loop, rates "
               "summed (the most these Python envs can do here)",
    "single": f"{display_name('single')} = one env stepped in a plain loop in this process",
    "bare_loop": f"{display_name('bare_loop')} = one worker per CPU stepping its envs at each "
                "posted step, nothing else (what alf_env's lockstep design allows here)",
    "envpool": "EnvPool = EnvPool's own C++ version of the env, one thread per CPU",
}
assert set(LEGEND) == set(REFERENCES)
#: What the verdict adds when SyncVectorEnv or EnvPool wins a case.
SYNC_ADVICE = ("Where SyncVectorEnv wins, use gymnasium's SyncVectorEnv: stepping the envs in "
               "the training process costs less there than handing each step to worker "
               "processes (alf_env keeps every env in a worker process, so that a crash or a "
               "hang stays there).")
ENVPOOL_ADVICE = ("Where EnvPool wins, it steps its own C++ version of the env: a choice for "
                  "the envs EnvPool has.")


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


def clear_lead(faster: Sequence[float], slower: Sequence[float]) -> bool:
    """Whether every repeat of ``faster`` beat every repeat of ``slower`` (the ranges of
    their repeats do not overlap); ``False`` if either has none."""
    return bool(faster) and bool(slower) and min(faster) > max(slower)


def noise(backend: str, median: Optional[float], ceiling: Optional[float]) -> bool:
    """Whether ``backend``'s median is above the ceiling's, which only noise can do."""
    return (backend not in ABOVE_CEILING_POSSIBLE and median is not None
            and ceiling is not None and median > ceiling)


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def fmt_rate_short(value: float) -> str:
    """Env-steps/s to 3 significant figures: ``974``, ``1.80k``, ``59.1k``, ``1.53M``
    (the machine's drift makes a fourth figure noise)."""
    rounded = float(f"{value:.3g}")
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rounded >= scale:
            return f"{rounded / scale:#.3g}".rstrip(".") + suffix
    return f"{rounded:#.3g}".rstrip(".")


def fmt_range(values: Sequence[float], fmt: Callable[[float], str] = fmt_rate_short) -> str:
    """``min - max`` of ``values``."""
    return f"{fmt(min(values))} - {fmt(max(values))}"


def _fmt_ratio(value: float) -> str:
    return f"{value:.2f}"


def fmt_paired(ratios: Sequence[float]) -> str:
    """``median (min - max)`` of paired ratios; ``n/a`` for none."""
    if not ratios:
        return "n/a"
    median = _fmt_ratio(statistics.median(ratios))
    if len(ratios) == 1:
        return median
    return f"{median} ({fmt_range(ratios, _fmt_ratio)})"


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


#: Stands in for the spaces of a range (``1.80k - 1.86k``) while :func:`fill` wraps, so
#: that a range is never split across lines.
_UNBREAKABLE = "\x00"


def fill(text: str, indent: str = "") -> str:
    """``text`` wrapped to :data:`WIDTH` columns; paths, ids and ranges (``a - b``) are not
    split."""
    glued = text.replace(" - ", f"{_UNBREAKABLE}-{_UNBREAKABLE}")
    return textwrap.fill(glued, WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False).replace(_UNBREAKABLE, " ")


def _asked(cases: Sequence[List[CaseResult]]) -> Set[str]:
    return {r.backend for results in cases for r in results}


def _measured(results: Sequence[CaseResult]) -> List[CaseResult]:
    """The rows of a case with figures, fastest median first."""
    rows = [r for r in results if r.status == "ok" and r.runs]
    return sorted(rows, key=lambda r: -(r.median or 0.0))


def _ceiling_median(results: Sequence[CaseResult]) -> Optional[float]:
    return next((r.median for r in results if r.backend == CEILING and r.status == "ok"),
                None)


def _case_name(results: Sequence[CaseResult]) -> str:
    return f"{results[0].workload} ({results[0].num_envs} envs)"


def _rate_cell(r: CaseResult, ceiling: Optional[float], fmt: Callable[[float], str]) -> str:
    median = r.median
    assert median is not None  # only rows with runs get a rate cell
    return fmt(median) + (f" {NOISE_MARK}" if noise(r.backend, median, ceiling) else "")


def any_noise(cases: Sequence[List[CaseResult]]) -> bool:
    """Whether a figure of any case is above its ceiling row."""
    return any(noise(r.backend, r.median, _ceiling_median(results))
               for results in cases for r in results if r.status == "ok")


def case_table(results: Sequence[CaseResult]) -> Optional[str]:
    """The terminal's table of one case: the measured rows, fastest first (``None``: none).

    Columns: the user-facing name, the median env-steps/s (marked when above the
    ceiling row), the min-max of the repeats and, when the ceiling ran, the paired
    ratio to it.
    """
    rows = _measured(results)
    if not rows:
        return None
    ceiling = _ceiling_median(results)
    header = ["backend", "env-steps/s", "min - max"] + (["x ceiling"] if ceiling else [])
    cells = [[display_name(r.backend), _rate_cell(r, ceiling, fmt_rate_short),
              fmt_range(r.rates)]
             + ([fmt_paired(paired_ratios(results, r.backend, CEILING))] if ceiling else [])
             for r in rows]
    return markdown_table(header, cells)


def legend(cases: Sequence[List[CaseResult]]) -> Optional[str]:
    """The line that says what the reference rows measured are (``None``: none ran)."""
    shown = {r.backend for results in cases for r in _measured(results)}
    parts = [LEGEND[ref] for ref in REFERENCES if ref in shown]
    return "Reference rows: " + "; ".join(parts) + "." if parts else None


def rate_table(cases: Sequence[List[CaseResult]]) -> str:
    """``results.md``'s table: every backend of every case with every figure.

    The median env-steps/s (marked when above the ceiling row), the min-max, and
    the paired ratios to the reference columns (AsyncVectorEnv, ceiling, EnvPool)
    whose backend was asked for.
    """
    asked = _asked(cases)
    references = [(ref, column) for ref, column in REFERENCE_COLUMNS if ref in asked]
    rows = []
    for results in cases:
        ceiling = _ceiling_median(results)
        for r in results:
            if r.median is not None:
                cells = [_rate_cell(r, ceiling, _fmt_rate), fmt_range(r.rates, _fmt_rate)]
                cells += [fmt_paired(paired_ratios(results, r.backend, ref))
                          for ref, _ in references]
            else:
                cells = ["not run" if r.status == "ok" else r.status, ""]
                cells += [""] * len(references)
            rows.append([r.workload, str(r.num_envs), display_name(r.backend), r.backend]
                        + cells + [str(len(r.runs))])
    return markdown_table(["workload", "envs", "backend", "id", "env-steps/s (median)",
                           "min - max"] + [column for _, column in references] + ["runs"],
                          rows)


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
    return markdown_table(["workload", "envs"] + [f"{display_name(n)} / {display_name(d)}"
                                                  for n, d in ratios_asked], rows)


def notes(cases: Sequence[List[CaseResult]]) -> List[str]:
    """One line per skipped or failed backend (deduplicated)."""
    seen: Dict[Tuple[str, str, str], List[str]] = {}
    for results in cases:
        for r in results:
            if r.status != "ok":
                seen.setdefault((r.backend, r.status, r.note), []).append(
                    f"{r.workload}/{r.num_envs}")
    return [f"{display_name(backend)} {status} on {', '.join(where)}: {note}"
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


def _heading(plan: Plan, repeats: int, conditions: Optional[Dict[str, Any]]) -> str:
    budget = f"{plan.steps} batched steps" if plan.steps else f"{plan.seconds:g} s"
    return (f"alf_env throughput: env-steps/s, {repeats} interleaved repeat(s) of "
            f"{budget} each after {plan.warmup} warm-up steps (start-up not timed); "
            f"{os.cpu_count()} CPUs{conditions_line(conditions)}")


def _note_lines(cases: Sequence[List[CaseResult]], extra_notes: Sequence[str]) -> List[str]:
    return [f"- note: {line}" for line in list(notes(cases)) + list(extra_notes)]


def terminal_report(cases: Sequence[List[CaseResult]], plan: Plan, repeats: int,
                    extra_notes: Sequence[str] = (),
                    conditions: Optional[Dict[str, Any]] = None) -> str:
    """What the terminal shows before the verdict: the heading, a short table per case
    (fastest first), the legend, the noise footnote and the notes; every line at most
    :data:`WIDTH` columns."""
    parts = [fill(_heading(plan, repeats, conditions) + "; fastest first.")]
    for results in cases:
        table = case_table(results)
        parts.append(_case_name(results) + ("\n" + table if table else
                                            ": nothing measured (see the notes)"))
    footer = []
    references = legend(cases)
    if references is not None:
        footer.append(fill(references))
    if any_noise(cases):
        footer.append(fill(NOISE_NOTE))
    footer += [fill(line, "  ") for line in _note_lines(cases, extra_notes)]
    if footer:
        parts.append("\n".join(footer))
    return "\n\n".join(parts) + "\n"


def ranked_choices(results: Sequence[CaseResult]) -> List[CaseResult]:
    """The measured rows of a case a user could pick (not the yardsticks), fastest first."""
    return [r for r in _measured(results) if r.backend not in YARDSTICKS]


def _long_name(backend: str) -> str:
    return "gymnasium's SyncVectorEnv" if backend == "gym_sync" else display_name(backend)


def case_verdict(results: Sequence[CaseResult]) -> Tuple[Optional[str], Optional[str]]:
    """One case's sentence of the verdict and its clear winner.

    Returns:
        ``(sentence, winner)``: ``sentence`` is ``None`` when no choice was
        measured; ``winner`` is the backend that won clearly over another,
        else ``None``.
    """
    choices = ranked_choices(results)
    if not choices:
        return None, None
    where, best = _case_name(results), choices[0]
    unit = "env-steps/s"
    if len(choices) == 1:
        return (f"{where}: {_long_name(best.backend)} is the only choice measured, at "
                f"{fmt_range(best.rates)} {unit}.", None)
    second = choices[1]
    if not clear_lead(best.rates, second.rates):
        return (f"{where}: no clear winner between {display_name(best.backend)} at "
                f"{fmt_range(best.rates)} and {display_name(second.backend)} at "
                f"{fmt_range(second.rates)} {unit}: their repeats overlap.", None)
    paired = paired_ratios(results, best.backend, second.backend)
    return (f"{where}: {_long_name(best.backend)} is fastest at {fmt_range(best.rates)} "
            f"{unit}, {statistics.median(paired):.2f}x {display_name(second.backend)} "
            f"({fmt_range(paired, _fmt_ratio)} repeat by repeat).", best.backend)


def verdict(cases: Sequence[List[CaseResult]], repeats: int) -> str:
    """The paragraph the bench ends with: the fastest choice per case on this machine,
    its margin over the runner-up and the spread of its repeats, or "no clear
    winner" naming both; what to use where SyncVectorEnv or EnvPool wins. Wrapped to
    :data:`WIDTH` columns; ``""`` when no choice was measured."""
    sentences: List[str] = []
    winners: Set[Optional[str]] = set()
    for results in cases:
        sentence, winner = case_verdict(results)
        if sentence is not None:
            sentences.append(sentence)
            winners.add(winner)
    if not sentences:
        return ""
    text = (f"Verdict, fastest choice per case on this machine ({os.cpu_count()} CPUs): "
            + " ".join(sentences))
    if "gym_sync" in winners:
        text += " " + SYNC_ADVICE
    if "envpool" in winners:
        text += " " + ENVPOOL_ADVICE
    if repeats < 2:
        text += " One repeat each: no spread to judge the margins by (--repeats 3 or more)."
    return fill(text) + "\n"


def report_markdown(cases: Sequence[List[CaseResult]], plan: Plan, repeats: int,
                    extra_notes: Sequence[str] = (),
                    conditions: Optional[Dict[str, Any]] = None) -> str:
    """``results.md``: the heading, the legend, every backend's figures, the noise
    footnote, the ratio table, the notes and the verdict."""
    parts = [f"# {_heading(plan, repeats, conditions)}"]
    references = legend(cases)
    if references is not None:
        parts.append(references)
    parts.append(rate_table(cases))
    if any_noise(cases):
        parts.append(NOISE_NOTE)
    ratios = ratio_table(cases)
    if ratios is not None:
        parts += ["Paired ratios, median (min - max) over repeats (the \"x\" columns "
                  "above are the same against the reference rows; n/a: a backend was "
                  "skipped or failed):", ratios]
    lines = _note_lines(cases, extra_notes)
    if lines:
        parts.append("\n".join(lines))
    text = verdict(cases, repeats)
    if text:
        parts.append(text.strip())
    return "\n\n".join(parts) + "\n"
