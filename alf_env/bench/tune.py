"""``alf-env-bench --env ENV --tune``: the FastVectorEnv layout that suits ENV here.

The candidates follow from the env's measured step time and this machine's
usable CPUs (:func:`candidates`): how many worker processes (each hosting
``num_envs / num_workers`` envs), where they run (``worker_cpus``: placed by
the OS, the default ``"auto"``, or pinned round robin, ``"spread"``), and whether the
batch is stepped in lockstep or EnvPool-style (``batch_size=num_envs // 2``,
the first half to finish). Each is measured like a backend, interleaved with
SyncVectorEnv and the other references, within ``--budget-s``; with
``--load N`` every candidate is measured a second time beside N busy
processes, and the choices are ranked by the geometric mean of their medians
over both conditions, so that the pick is not one that only wins on a quiet
machine.

The recommendation (:func:`recommendation`) is the fastest *choice*, layout or
alternative (SyncVectorEnv, AsyncVectorEnv, PufferLib, EnvPool; the ceiling
only measures the machine): alf_env keeps every env in a worker process,
because a crash or a hang must stay there, so where stepping in the trainer's
process is faster it says to use SyncVectorEnv, and then gives alf_env's best
layout for those who need the isolation. It says "no clear winner" and gives
both lines when the repeats of the top two overlap, and it states the spread
of the repeats of both.
"""

import functools
import math
import statistics
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from alf_env.bench.backends import BACKENDS, BuildRunner, display_name, fast_vector_runner
from alf_env.bench.core import CaseResult, Plan
from alf_env.bench.loads import BusyLoad
from alf_env.bench.measure import Policy, ProgressBar, run_case
from alf_env.bench.report import (
    CEILING,
    LEGEND,
    NOISE_MARK,
    NOISE_NOTE,
    clear_lead,
    fill,
    fmt_range,
    fmt_rate_short,
    markdown_table,
    noise,
)
from alf_env.bench.workloads import get as get_workload
from alf_env.bench.workloads import make_env

#: Seconds ``--tune`` takes by default.
DEFAULT_BUDGET_S = 60.0
#: References measured beside the candidates (skipped where they do not apply).
REFERENCES = ("gym_sync", "gym_async", "pufferlib", "envpool", "ceiling")
#: Interleaved repeats per candidate and condition.
REPEATS = 3
#: Seconds a measurement needs besides its timed part (start-up, warm-up), as
#: budgeted; the timed part gets what is left, at least MIN_SECONDS.
STARTUP_SECONDS = 0.6
MIN_SECONDS = 0.2
WARMUP = 20
#: Envs that take longer than this per step are worth one worker each.
SLOW_STEP_US = 1000.0


class Layout(NamedTuple):
    """One FastVectorEnv layout: its constructor arguments."""
    num_workers: int
    worker_cpus: Any = "auto"
    batch_size: Optional[int] = None

    def kwargs(self) -> Dict[str, Any]:
        """The constructor's keyword arguments (defaults left out)."""
        out: Dict[str, Any] = {"num_workers": self.num_workers}
        if self.worker_cpus != "auto":
            out["worker_cpus"] = self.worker_cpus
        if self.batch_size is not None:
            out["batch_size"] = self.batch_size
        return out

    def constructor(self) -> str:
        """The line to paste."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs().items())
        line = f"FastVectorEnv(env_fns, {args})"
        if self.batch_size is not None:
            line += "  # EnvPool-style: send() / recv()"
        return line

    @property
    def name(self) -> str:
        """What the table and the JSON call it, e.g. ``FastVectorEnv (2 workers, spread)``."""
        parts = [f"{self.num_workers} worker{'s' if self.num_workers != 1 else ''}"]
        if self.worker_cpus != "auto":
            parts.append("OS-placed" if self.worker_cpus is None else str(self.worker_cpus))
        if self.batch_size is not None:
            parts.append(f"batch {self.batch_size}")
        return f"FastVectorEnv ({', '.join(parts)})"


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(num_envs: int, cpus: int, step_us: float) -> List[Layout]:
    """The layouts worth trying for ``num_envs`` envs of ``step_us`` µs per step.

    Worker counts: the divisors of ``num_envs`` up to the usable CPUs (more
    workers than CPUs only take turns), plus one env per worker when a step
    is slow enough that the hand-off does not matter and uneven envs gain
    from finishing independently. Placement is tried where it can differ
    (at least as many workers as CPUs, and more than one CPU); the
    asynchronous mode where its half batch is whole workers.
    """
    workers = [w for w in _divisors(num_envs) if w <= cpus]
    if step_us >= SLOW_STEP_US and num_envs not in workers:
        workers.append(num_envs)
    out: List[Layout] = []
    for w in workers:
        placements = ["auto", "spread"] if w >= cpus >= 2 else ["auto"]
        out += [Layout(w, p) for p in placements]
        half = num_envs // 2
        if w >= 2 and half % (num_envs // w) == 0:
            out.append(Layout(w, "auto", half))
    return out


def step_time_us(workload: str, seconds: float = 0.3) -> float:
    """Mean µs per step of one env of ``workload`` in a plain loop (resets included)."""
    env = make_env(workload, 0)
    try:
        env.reset(seed=0)
        space = env.action_space
        space.seed(0)
        steps, clock = 0, time.perf_counter
        begin = clock()
        while clock() - begin < seconds or steps < 10:
            _, _, terminated, truncated, _ = env.step(space.sample())
            if terminated or truncated:
                env.reset()
            steps += 1
        return (clock() - begin) / steps * 1e6
    finally:
        env.close()


class Choice(NamedTuple):
    """What :func:`choose` found.

    Attributes:
        best: the fastest choice: a layout's name or a reference's id.
        score: its score (env-steps/s; the geometric mean of its medians over the
            conditions).
        runner_up: the next fastest choice (``None``: only one was measured).
        margin: best / runner-up score.
        clear: whether ``best`` won clearly: in every condition, every repeat of it
            beat every repeat of the runner-up
            (:func:`~alf_env.bench.report.clear_lead`).
        best_layout: the fastest FastVectorEnv layout.
        layout_ratio: its score / ``best``'s (1.0 when it is ``best``).
        over_sync: its score / SyncVectorEnv's (``None``: not measured).
    """
    best: str
    score: float
    runner_up: Optional[str]
    margin: Optional[float]
    clear: bool
    best_layout: str
    layout_ratio: float
    over_sync: Optional[float]


def _score(medians: Sequence[Optional[float]]) -> Optional[float]:
    positive = [m for m in medians if m is not None and m > 0]
    if not medians or len(positive) != len(medians):
        return None
    return math.exp(sum(math.log(m) for m in positive) / len(positive))


def _medians(rates: Sequence[Sequence[float]]) -> List[Optional[float]]:
    return [statistics.median(r) if r else None for r in rates]


def choose(rates: Dict[str, List[List[float]]], layouts: Sequence[str],
           alternatives: Sequence[str] = ()) -> Choice:
    """The fastest choice: the best geometric mean over the conditions of the medians.

    Args:
        rates: name -> its env-steps/s of every repeat, one list per condition
            (empty: failed or skipped there).
        layouts: the names of the FastVectorEnv layouts.
        alternatives: the references a user could pick instead (SyncVectorEnv,
            EnvPool, ...); the other names (the ceiling) are not choices.

    Raises:
        RuntimeError: no layout has a score.
    """
    def ranked(names: Sequence[str]) -> List[Tuple[float, str]]:
        scored = [(s, name) for name in names
                  if (s := _score(_medians(rates.get(name, [])))) is not None]
        return sorted(scored, key=lambda pair: -pair[0])

    by_layout = ranked(layouts)
    if not by_layout:
        raise RuntimeError("no layout could be measured (see the errors above)")
    (best_score, best), *rest = ranked(list(layouts) + list(alternatives))
    runner_score, runner_up = rest[0] if rest else (None, None)
    clear = runner_up is not None and all(
        clear_lead(mine, theirs) for mine, theirs in zip(rates[best], rates[runner_up]))
    sync = _score(_medians(rates.get("gym_sync", [])))
    layout_score, best_layout = by_layout[0]
    return Choice(best, best_score, runner_up,
                  best_score / runner_score if runner_score else None, clear, best_layout,
                  layout_score / best_score, layout_score / sync if sync else None)


def _run(builders: Dict[str, BuildRunner], workload: str, num_envs: int, plan: Plan,
         progress: ProgressBar, policy: Optional[Policy]) -> Dict[str, CaseResult]:
    results = {name: CaseResult(workload, num_envs, name) for name in builders}
    run_case(results, plan, REPEATS, progress, policy, builders)
    return results


def reference_line(reference: str, workload: str, num_envs: int, cpus: int) -> Optional[str]:
    """The line that builds ``reference`` for the user's env (``None``: not a choice)."""
    if reference == "gym_sync":
        return "gymnasium.vector.SyncVectorEnv(env_fns)"
    if reference == "gym_async":
        return "gymnasium.vector.AsyncVectorEnv(env_fns, shared_memory=True)"
    if reference == "pufferlib":
        return (f"pufferlib.vector.make(..., backend=pufferlib.vector.Multiprocessing, "
                f"num_workers={min(cpus, num_envs)})")
    if reference == "envpool":
        envpool_id = get_workload(workload).envpool_id
        return (None if envpool_id is None
                else f"envpool.make_gymnasium({envpool_id!r}, num_envs={num_envs})")
    return None


def tune(workload: str, num_envs: int, cpus: int, budget_s: float, load: int,
         progress_stream: Any, policy: Optional[Policy] = None,
         references: Sequence[str] = REFERENCES) -> Dict[str, Any]:
    """Measures every candidate layout (and the references) and picks the fastest choice.

    Returns:
        a JSON-ready report: the env's step time, the layouts with their
        constructor lines, every result per condition, the lines that build the
        references one could pick instead, and the choice.
    """
    step_us = step_time_us(workload)
    layouts = {layout.name: layout for layout in candidates(num_envs, cpus, step_us)}
    builders: Dict[str, BuildRunner] = {
        name: functools.partial(fast_vector_runner, **layout.kwargs())
        for name, layout in layouts.items()}
    builders.update({name: BACKENDS[name].build for name in references})
    conditions = [0] + ([load] if load else [])
    count = len(builders) * REPEATS * len(conditions)
    seconds = max(MIN_SECONDS, budget_s / count - STARTUP_SECONDS)
    plan = Plan(warmup=WARMUP, steps=None, seconds=seconds)
    progress = ProgressBar(count, progress_stream)
    per_condition: Dict[int, Dict[str, CaseResult]] = {}
    try:
        for busy in conditions:
            with BusyLoad(busy):
                per_condition[busy] = _run(builders, workload, num_envs, plan, progress,
                                           policy)
    finally:
        progress.close()
    rates = {name: [per_condition[c][name].rates if per_condition[c][name].status == "ok"
                    else [] for c in conditions] for name in builders}
    tuned = summary(workload, num_envs, cpus, step_us, conditions, seconds,
                    list(layouts.values()), references, rates)
    tuned["results"] = {str(c): [r.to_json() for r in rs.values()]
                        for c, rs in per_condition.items()}
    return tuned


def summary(workload: str, num_envs: int, cpus: int, step_us: float, conditions: List[int],
            seconds: float, layouts: Sequence[Layout], references: Sequence[str],
            rates: Dict[str, List[List[float]]]) -> Dict[str, Any]:
    """The JSON-ready report of a tuning run, the choice made (what :func:`report`
    prints).

    Args:
        conditions: the busy processes beside each condition (``[0]``, or ``[0, N]``).
        seconds: the timed seconds of each measurement.
        layouts: the layouts tried.
        references: the references measured beside them.
        rates: name (a layout's or a reference's) -> its env-steps/s of every
            repeat, one list per condition (empty: failed or skipped there).
    """
    lines = {name: line for name in references
             if (line := reference_line(name, workload, num_envs, cpus)) is not None}
    # A choice is what has a line to paste: the ceiling only measures the machine.
    choice = choose(rates, [layout.name for layout in layouts], list(lines))
    return {"workload": workload, "num_envs": num_envs, "cpus": cpus,
            "step_us": step_us, "conditions": conditions, "seconds": seconds,
            "repeats": REPEATS,
            "layouts": {layout.name: dict(layout._asdict(), constructor=layout.constructor())
                        for layout in layouts},
            "reference_lines": lines,
            "rates": rates, "scores": {name: _medians(r) for name, r in rates.items()},
            "choice": choice._asdict()}


def _cell(rates: Sequence[float], median: Optional[float], ceiling: Optional[float],
          name: str) -> str:
    if median is None or not rates:
        return "n/a"
    mark = f" {NOISE_MARK}" if noise(name, median, ceiling) else ""
    return f"{fmt_rate_short(median)}{mark} ({fmt_range(rates)})"


def _table(tuned: Dict[str, Any]) -> Tuple[str, bool]:
    """The table of every layout and reference, fastest first; whether a figure is
    above the ceiling row."""
    conditions = tuned["conditions"]
    header = ["layout or alternative"] + [
        "env-steps/s (min - max)" if c == 0 else f"--load {c} (min - max)"
        for c in conditions]
    ceilings = tuned["scores"].get(CEILING, [None] * len(conditions))
    flagged = False
    rows = []
    for name, medians in sorted(tuned["scores"].items(),
                                key=lambda kv: -(_score(kv[1]) or 0.0)):
        cells = []
        for rates, median, ceiling in zip(tuned["rates"][name], medians, ceilings):
            flagged = flagged or noise(name, median, ceiling)
            cells.append(_cell(rates, median, ceiling, name))
        rows.append([display_name(name)] + cells)
    return markdown_table(header, rows), flagged


def _ranges(tuned: Dict[str, Any], name: str) -> List[str]:
    return [fmt_range(r) if r else "n/a" for r in tuned["rates"][name]]


def _spreads(tuned: Dict[str, Any], first: str, second: str) -> str:
    """``a - b against c - d env-steps/s`` per condition: the repeats of both."""
    unit = " env-steps/s"
    out = []
    for load, a, b in zip(tuned["conditions"], _ranges(tuned, first), _ranges(tuned, second)):
        out.append(f"{a} against {b}" + (f" beside {load} busy process(es)" if load else unit))
    return "; ".join(out)


def _line(tuned: Dict[str, Any], name: str) -> str:
    layout = tuned["layouts"].get(name)
    line: str = layout["constructor"] if layout else tuned["reference_lines"][name]
    return "    " + line


def _long_name(name: str) -> str:
    return "gymnasium's SyncVectorEnv" if name == "gym_sync" else display_name(name)


def recommendation(tuned: Dict[str, Any]) -> str:
    """What to use: the fastest choice and its line, with its margin over the runner-up
    and the spread of the repeats of both; "no clear winner" (and both lines) when their
    repeats overlap; SyncVectorEnv when it is fastest, then alf_env's best layout."""
    choice = tuned["choice"]
    best, runner_up = choice["best"], choice["runner_up"]
    paragraphs: List[str] = []
    if runner_up is None:
        paragraphs.append(fill(f"{_long_name(best)} is the only choice measured, at "
                               f"{'; '.join(_ranges(tuned, best))} env-steps/s:"))
        paragraphs.append(_line(tuned, best))
    elif not choice["clear"]:
        paragraphs.append(fill(
            f"No clear winner: the repeats of {display_name(best)} and "
            f"{display_name(runner_up)} overlap ({_spreads(tuned, best, runner_up)}); "
            "either will do:"))
        paragraphs.append(_line(tuned, best) + "\n" + _line(tuned, runner_up))
    else:
        text = (f"Fastest: {_long_name(best)}, {choice['margin']:.2f}x the runner-up "
                f"{display_name(runner_up)}. Repeats: {_spreads(tuned, best, runner_up)}.")
        if best == choice["best_layout"] and choice["over_sync"] is not None \
                and runner_up != "gym_sync":
            text += f" It is {choice['over_sync']:.2f}x gymnasium's SyncVectorEnv."
        paragraphs.append(fill(text + " Use it:"))
        paragraphs.append(_line(tuned, best))
    shown = {best} | ({runner_up} if runner_up is not None and not choice["clear"] else set())
    if choice["best_layout"] not in shown:
        ratio = f"{choice['layout_ratio']:.2f}x {display_name(best)}"
        if best == "gym_sync" and choice["clear"]:
            paragraphs.append(fill(
                "SyncVectorEnv steps the envs in this process: for this env that costs less "
                "than handing each step to worker processes. alf_env keeps every env in a "
                "worker process (a crash or a hang stays there); if you need that, its best "
                f"layout here, at {ratio}:"))
        else:
            paragraphs.append(fill(f"alf_env's best layout here, at {ratio}:"))
        paragraphs.append(_line(tuned, choice["best_layout"]))
    return "\n\n".join(paragraphs) + "\n"


def report(tuned: Dict[str, Any]) -> str:
    """The text the command prints: the table, the legend, the recommendation and its
    lines; every line at most :data:`~alf_env.bench.report.WIDTH` columns."""
    conditions = tuned["conditions"]
    table, flagged = _table(tuned)
    parts = [fill(f"Tuning {tuned['workload']}: {tuned['num_envs']} envs, {tuned['cpus']} "
                  f"usable CPU(s), one env step {tuned['step_us']:.1f} µs; median and min - "
                  f"max of {tuned['repeats']} interleaved repeats of {tuned['seconds']:.2g} s; "
                  "fastest first"), table]
    footer = [fill("Reference row: " + LEGEND[CEILING] + ".")] if CEILING in tuned["scores"] \
        else []
    if flagged:
        footer.append(fill(NOISE_NOTE))
    if len(conditions) > 1:
        footer.append(fill("The order: the geometric mean of the medians with and without "
                           "the load."))
    if footer:
        parts.append("\n".join(footer))
    parts.append(recommendation(tuned).rstrip("\n"))
    return "\n\n".join(parts) + "\n"
