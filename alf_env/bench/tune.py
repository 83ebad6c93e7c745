"""``alf-env-bench --env ENV --tune``: the FastVectorEnv layout that suits ENV here.

The candidates follow from the env's measured step time and this machine's
usable CPUs (:func:`candidates`): how many worker processes (each hosting
``num_envs / num_workers`` envs), where they run (``worker_cpus``: placed by
the OS, the default ``"auto"``, or pinned round robin, ``"spread"``), and whether the
batch is stepped in lockstep or EnvPool-style (``batch_size=num_envs // 2``,
the first half to finish). Each is measured like a backend, interleaved with
SyncVectorEnv and the other references, within ``--budget-s``; with
``--load N`` every candidate is measured a second time beside N busy
processes, and the layout is chosen by the geometric mean of its medians over
both conditions, so that it is not a layout that only wins on a quiet machine.
"""

import functools
import math
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from alf_env.bench.backends import BACKENDS, BuildRunner, fast_vector_runner
from alf_env.bench.core import CaseResult, Plan
from alf_env.bench.loads import BusyLoad
from alf_env.bench.measure import Policy, ProgressBar, run_case
from alf_env.bench.report import markdown_table
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
            line += "  # EnvPool-style: drive it with send() / recv()"
        return line

    @property
    def name(self) -> str:
        """A short name for tables and the JSON."""
        return "fv " + " ".join(f"{k}={v}" for k, v in self.kwargs().items())


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
    """What :func:`choose` picked.

    Attributes:
        best: the fastest layout's name.
        score: its score (env-steps/s; the geometric mean over conditions).
        runner_up: the next best layout's name (``None``: only one).
        margin: best / runner-up score.
        over_sync: best / SyncVectorEnv's score (``None``: not measured).
    """
    best: str
    score: float
    runner_up: Optional[str]
    margin: Optional[float]
    over_sync: Optional[float]


def _score(medians: Sequence[Optional[float]]) -> Optional[float]:
    positive = [m for m in medians if m is not None and m > 0]
    if not medians or len(positive) != len(medians):
        return None
    return math.exp(sum(math.log(m) for m in positive) / len(positive))


def choose(scores: Dict[str, List[Optional[float]]], layouts: Sequence[str]) -> Choice:
    """The layout whose medians (one per condition) have the best geometric mean.

    Args:
        scores: name -> its median env-steps/s in each condition (``None``:
            failed or skipped there).
        layouts: the names that are candidates (the others are references).

    Raises:
        RuntimeError: no candidate has a score.
    """
    ranked = sorted(((s, name) for name in layouts
                     if (s := _score(scores.get(name, []))) is not None), reverse=True)
    if not ranked:
        raise RuntimeError("no layout could be measured (see the errors above)")
    (best_score, best), rest = ranked[0], ranked[1:]
    sync = _score(scores.get("gym_sync", []))
    return Choice(best, best_score, rest[0][1] if rest else None,
                  best_score / rest[0][0] if rest else None,
                  best_score / sync if sync else None)


def _run(builders: Dict[str, BuildRunner], workload: str, num_envs: int, plan: Plan,
         progress: ProgressBar, policy: Optional[Policy]) -> Dict[str, CaseResult]:
    results = {name: CaseResult(workload, num_envs, name) for name in builders}
    run_case(results, plan, REPEATS, progress, policy, builders)
    return results


def tune(workload: str, num_envs: int, cpus: int, budget_s: float, load: int,
         progress_stream: Any, policy: Optional[Policy] = None,
         references: Sequence[str] = REFERENCES) -> Dict[str, Any]:
    """Measures every candidate layout (and the references) and picks the best.

    Returns:
        a JSON-ready report: the env's step time, the layouts with their
        constructor lines, every result per condition and the choice.
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
    scores = {name: [per_condition[c][name].median for c in conditions] for name in builders}
    choice = choose(scores, list(layouts))
    return {"workload": workload, "num_envs": num_envs, "cpus": cpus,
            "step_us": step_us, "conditions": conditions, "seconds": seconds,
            "layouts": {name: dict(layout._asdict(), constructor=layout.constructor())
                        for name, layout in layouts.items()},
            "results": {str(c): [r.to_json() for r in rs.values()]
                        for c, rs in per_condition.items()},
            "scores": scores, "choice": choice._asdict()}


def _rate(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def report(tuned: Dict[str, Any]) -> str:
    """The text the command prints: the table and the constructor line."""
    conditions = tuned["conditions"]
    header = ["layout or reference"] + [
        "env-steps/s" if c == 0 else f"env-steps/s, --load {c}" for c in conditions]
    rows = [[name] + [_rate(m) for m in medians] for name, medians in
            sorted(tuned["scores"].items(), key=lambda kv: -(_score(kv[1]) or 0.0))]
    choice = tuned["choice"]
    best = tuned["layouts"][choice["best"]]
    lines = [f"# Tuning {tuned['workload']}: {tuned['num_envs']} envs, {tuned['cpus']} usable "
             f"CPU(s), one env step {tuned['step_us']:.1f} µs",
             markdown_table(header, rows), "Fastest layout:", "", f"    {best['constructor']}",
             ""]
    if choice["runner_up"] is not None:
        lines.append(f"{choice['margin']:.2f}x the next best ({choice['runner_up']})")
    if choice["over_sync"] is not None:
        lines.append(f"{choice['over_sync']:.2f}x gymnasium's SyncVectorEnv")
    if len(conditions) > 1:
        lines.append("(scores: geometric mean of the medians with and without the load)")
    return "\n".join(lines) + "\n"
