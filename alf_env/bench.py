"""``alf-env-bench``: env-steps/s of alf_env and of the usual alternatives, side by side.

What it measures
----------------
For every (workload, number of envs) case, each backend builds a batched env
of ``num_envs`` copies of the same env logic, resets it, warms up, and then
steps it with fixed, precomputed actions (the same actions for every backend)
while the clock runs; then it closes the env. Start-up, reset and warm-up are
excluded from the timing. The rate reported is *env-steps per second*
(env-steps done while the clock ran / seconds).

Backends (:data:`BACKENDS`; ``--backends`` picks some):

======================  ==========================================================
``fast``                ``FastParallelEnvironment`` (ALF API, shared memory).
``fast_vector``         ``alf_env.vector.FastVectorEnv``, synchronous (gymnasium
                        API, shared memory; a drop-in for ``AsyncVectorEnv``).
``fast_vector_async``   ``FastVectorEnv(batch_size=num_envs // 2)``: EnvPool-style,
                        each step returns the first half of the envs to finish.
``fast_vector_epw4``    ``FastVectorEnv(envs_per_worker=4)``: 4 envs per worker
                        process (needs a multiple of 4 envs).
``fast_spread``         ``fast`` with ``worker_cpus="spread"`` (worker ``i``
                        pinned to CPU ``i % num_cpus``).
``fast_vector_spread``  ``fast_vector`` with ``worker_cpus="spread"``.
``parallel``            ``ParallelAlfEnvironment`` (ALF API, pipes).
``gym_async``           ``gymnasium.vector.AsyncVectorEnv(shared_memory=True)``.
``gym_sync``            ``gymnasium.vector.SyncVectorEnv`` (in this process; the
                        ceiling for trivial envs).
``sb3_subproc``         ``stable_baselines3``'s ``SubprocVecEnv`` (skipped when
                        stable-baselines3 is not installed).
``single``              one env stepped in a plain loop in this process (the rate
                        of a single env, whatever ``num_envs`` is).
======================  ==========================================================

Every backend that uses processes starts them with ``fork``. All backends
auto-reset (the step after the end of an episode is a reset; SB3 resets in the
same step), so they do about the same work per env-step.

Workloads (see :mod:`alf_env.workloads`): ``W1`` trivial float32[4] env
(transport overhead), ``W2`` uint8[84, 84, 4] frames (bytes moved), ``W3``
~1 ms of CPU per step (overlap of the workers' work), ``W4`` 0.2-2 ms of CPU
per step (uneven envs), and any gymnasium id such as ``CartPole-v1``.

Measurements are interleaved: for each repeat, every backend is measured once
(round robin, in an order rotated per repeat), so machine noise hits all
backends alike. The table gives the median over repeats, the min-max spread
and the ratio to ``gym_async``; the ratio table gives the ratios the speed
targets are stated in. A ratio is the median over repeats of the *paired*
ratios (repeat i of one backend against repeat i of the other).

Output: the tables on stdout, a progress bar on stderr, and in ``--out DIR``
``results.json`` (every measurement), ``results.md`` (the tables) and
``throughput.png`` (env-steps/s against the number of envs, one line per
backend, log scale).

Examples::

    alf-env-bench --quick                       # under a minute
    alf-env-bench                               # everything, several minutes
    alf-env-bench --workload W1 --num-envs 8,16 --backends fast,gym_async \\
        --repeats 5 --out w1_results

The exit status is 1 if a backend failed (an error, not a skip) or a worker
process was left running, 130 if interrupted (what was measured is still
reported), else 0.
"""

import argparse
import functools
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import (Any, Callable, Dict, List, NamedTuple, Optional, Sequence, TextIO,
                    Tuple)

import gymnasium as gym
import numpy as np
import torch

import alf_env
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.workloads import WORKLOADS, make_workload

try:
    from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
    FAST_IMPORT_ERROR: Optional[str] = None
except ImportError as err:  # the native module may be missing
    FastParallelEnvironment = None  # type: ignore[assignment,misc]
    FAST_IMPORT_ERROR = f"{type(err).__name__}: {err}"
try:
    from alf_env.vector import FastVectorEnv
    FAST_VECTOR_IMPORT_ERROR: Optional[str] = None
except ImportError as err:
    FastVectorEnv = None  # type: ignore[assignment,misc]
    FAST_VECTOR_IMPORT_ERROR = f"{type(err).__name__}: {err}"

#: Env counts per workload when ``--num-envs`` is not given (8 for other ids).
DEFAULT_NUM_ENVS: Dict[str, List[int]] = {
    "W1": [2, 4, 8, 16],
    "W2": [4, 8, 16],
    "W3": [2, 4, 8],
    "W4": [8],
    "CartPole-v1": [8],
}
#: What ``--quick`` runs (under a minute on 2 cores): the defaults it changes.
QUICK = {"workloads": ["W1", "W2", "W3", "CartPole-v1"], "num_envs": [2, 8],
         "repeats": 2, "seconds": 0.15, "warmup": 10}
#: The defaults of a full run.
FULL = {"workloads": list(DEFAULT_NUM_ENVS), "num_envs": None,
        "repeats": 3, "seconds": 1.5, "warmup": 50}
DEFAULT_OUT = "bench_out"
RESULTS_JSON, RESULTS_MD, PLOT_PNG = "results.json", "results.md", "throughput.png"

# Envs per worker of the fast_vector_epw4 backend.
ENVS_PER_WORKER = 4
NUM_ACTIONS = 64  # distinct precomputed batched actions, cycled through
ACTION_SEED = 0
#: The backend every rate is compared with in the main table.
BASELINE = "gym_async"
#: The ratios the speed targets are stated in (docs/benchmarks.md).
RATIOS = (("fast", "gym_async"), ("fast", "single"), ("fast_spread", "single"),
          ("fast_vector", "gym_async"), ("fast_vector", "single"),
          ("fast_vector_spread", "single"), ("fast_vector_epw4", "gym_sync"),
          ("fast_vector_async", "fast_vector"))


# -- runners: one per backend, all with the same shape ------------------------

class Runner(NamedTuple):
    """A started, reset env ready to be stepped.

    Attributes:
        step: ``step(k)`` does one round with precomputed action ``k``: one
            batched step for the batched backends, ``num_envs`` env-steps of
            the one env for ``single``.
        close: releases everything the runner started; idempotent.
        env_steps_per_round: env-steps in one round (``None``: ``num_envs``).
    """
    step: Callable[[int], None]
    close: Callable[[], None]
    env_steps_per_round: Optional[int] = None


@dataclass
class Actions:
    """The fixed actions of one case, in the forms the backends take.

    Attributes:
        numpy: ``NUM_ACTIONS`` batched actions, each of shape ``(num_envs, ...)``.
        torch: the same as torch tensors (for the ALF-style envs).
    """
    numpy: List[np.ndarray]
    torch: List[torch.Tensor]

    @staticmethod
    def make(workload: str, num_envs: int) -> "Actions":
        """Samples the actions from the workload's action space with a fixed seed."""
        probe = make_workload(workload)
        try:
            space = probe.action_space
            space.seed(ACTION_SEED)
            batches = [np.stack([np.asarray(space.sample()) for _ in range(num_envs)])
                       for _ in range(NUM_ACTIONS)]
        finally:
            probe.close()
        return Actions(numpy=batches, torch=[torch.as_tensor(b) for b in batches])


class _Skip(Exception):
    """A backend that cannot run here (reported as skipped, not as an error)."""


def _started(env: Any, reset: Callable[[], Any]) -> None:
    """Runs ``reset()``; closes ``env`` if that raises."""
    try:
        reset()
    except BaseException:
        env.close()
        raise


def _alf_env(workload: str, env_id: int = 0) -> AlfGymWrapper:
    """Workload ``workload`` as an ALF environment (a picklable constructor)."""
    return AlfGymWrapper(make_workload(workload, env_id), env_id=env_id)


def _alf_runner(env_class: Any, workload: str, num_envs: int, actions: Actions,
                **kwargs: Any) -> Runner:
    """Runner over ``ParallelAlfEnvironment`` or a class with the same constructor."""
    env = env_class([functools.partial(_alf_env, workload) for _ in range(num_envs)],
                    **kwargs)
    _started(env, env.reset)
    batches = actions.torch
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close)


def _fast_runner(workload: str, num_envs: int, actions: Actions, **kwargs: Any) -> Runner:
    if FastParallelEnvironment is None:
        raise _Skip(f"cannot import FastParallelEnvironment ({FAST_IMPORT_ERROR})")
    return _alf_runner(FastParallelEnvironment, workload, num_envs, actions, **kwargs)


def _env_fns(workload: str, num_envs: int) -> List[Callable[[], gym.Env]]:
    return [functools.partial(make_workload, workload, i) for i in range(num_envs)]


def _gym_vector_runner(make_vector: Callable[[List[Callable[[], gym.Env]]], Any],
                       workload: str, num_envs: int, actions: Actions,
                       batch_size: Optional[int] = None) -> Runner:
    """Runner over a gymnasium vector env built by ``make_vector(env_fns)``.

    With ``batch_size``, each step sends the first ``batch_size`` actions (an
    asynchronous ``FastVectorEnv`` steps the envs of its last ``recv``).
    """
    env = make_vector(_env_fns(workload, num_envs))
    _started(env, lambda: env.reset(seed=ACTION_SEED))
    batches = actions.numpy if batch_size is None else [b[:batch_size] for b in actions.numpy]
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close,
                  env_steps_per_round=batch_size)


def _fast_vector_runner(workload: str, num_envs: int, actions: Actions,
                        envs_per_worker: int = 1, async_mode: bool = False,
                        worker_cpus: Any = None) -> Runner:
    """Runner over ``FastVectorEnv``, synchronous or EnvPool-style (half the envs)."""
    if FastVectorEnv is None:
        raise _Skip(f"cannot import FastVectorEnv ({FAST_VECTOR_IMPORT_ERROR})")
    if num_envs % envs_per_worker:
        raise _Skip(f"needs a multiple of {envs_per_worker} envs")
    batch_size = num_envs // 2 if async_mode else None
    if batch_size is not None and batch_size < 1:
        raise _Skip("needs at least 2 envs")
    return _gym_vector_runner(
        lambda fns: FastVectorEnv(fns, batch_size=batch_size,
                                  envs_per_worker=envs_per_worker, context="fork",
                                  worker_cpus=worker_cpus),
        workload, num_envs, actions, batch_size)


def _sb3_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    """Runner over stable-baselines3's ``SubprocVecEnv`` (same-step auto-reset)."""
    if importlib.util.find_spec("stable_baselines3") is None:
        raise _Skip("stable-baselines3 is not installed; `pip install stable-baselines3` "
                    "adds this backend")
    from stable_baselines3.common.vec_env import SubprocVecEnv

    env = SubprocVecEnv(_env_fns(workload, num_envs), start_method="fork")
    env.seed(ACTION_SEED)
    _started(env, env.reset)
    batches = actions.numpy
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close)


def _single_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    """One env in this process; a round is ``num_envs`` env-steps of it.

    Like the vector envs, the step after the end of an episode is a reset.
    """
    env = make_workload(workload, 0)
    env.reset(seed=ACTION_SEED)
    flat = [a for batch in actions.numpy for a in batch]  # per-env actions, in order
    done = False

    def step(k: int) -> None:
        nonlocal done
        base = (k * num_envs) % len(flat)
        for j in range(num_envs):
            if done:
                env.reset()
                done = False
            else:
                _, _, terminated, truncated, _ = env.step(flat[(base + j) % len(flat)])
                done = terminated or truncated

    return Runner(step=step, close=env.close)


BuildRunner = Callable[[str, int, Actions], Runner]


class Backend(NamedTuple):
    """One way of batching envs.

    Attributes:
        build: ``build(workload, num_envs, actions)`` returns a started
            :class:`Runner` (or raises ``_Skip``).
        label: what it is, for the help text and the plot's legend.
    """
    build: BuildRunner
    label: str


#: The one table of backends, in the order they are measured and shown.
BACKENDS: Dict[str, Backend] = {
    "fast": Backend(_fast_runner, "FastParallelEnvironment"),
    "fast_vector": Backend(_fast_vector_runner, "FastVectorEnv"),
    "fast_vector_async": Backend(
        functools.partial(_fast_vector_runner, async_mode=True),
        "FastVectorEnv, batch_size=n/2 (EnvPool-style)"),
    "fast_vector_epw4": Backend(
        functools.partial(_fast_vector_runner, envs_per_worker=ENVS_PER_WORKER),
        f"FastVectorEnv, envs_per_worker={ENVS_PER_WORKER}"),
    "fast_spread": Backend(functools.partial(_fast_runner, worker_cpus="spread"),
                           'FastParallelEnvironment, worker_cpus="spread"'),
    "fast_vector_spread": Backend(functools.partial(_fast_vector_runner, worker_cpus="spread"),
                                  'FastVectorEnv, worker_cpus="spread"'),
    "parallel": Backend(functools.partial(_alf_runner, ParallelAlfEnvironment),
                        "ParallelAlfEnvironment (pipes)"),
    "gym_async": Backend(
        functools.partial(
            _gym_vector_runner,
            lambda fns: gym.vector.AsyncVectorEnv(fns, shared_memory=True, context="fork")),
        "gymnasium AsyncVectorEnv"),
    "gym_sync": Backend(functools.partial(_gym_vector_runner, gym.vector.SyncVectorEnv),
                        "gymnasium SyncVectorEnv (in-process)"),
    "sb3_subproc": Backend(_sb3_runner, "stable-baselines3 SubprocVecEnv"),
    "single": Backend(_single_runner, "one env, plain loop"),
}


# -- measuring ----------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """How long each measurement runs.

    Attributes:
        warmup: untimed rounds after reset.
        steps: timed rounds, or ``None`` to run for ``seconds``.
        seconds: the time budget when ``steps`` is ``None``.
    """
    warmup: int
    steps: Optional[int]
    seconds: float


@dataclass
class Measurement:
    """One timed run of one backend.

    Attributes:
        env_steps: env-steps done while the clock ran.
        seconds: how long they took.
        startup_seconds: start-up, reset and warm-up (not part of the rate).
    """
    env_steps: int
    seconds: float
    startup_seconds: float

    @property
    def rate(self) -> float:
        """Env-steps per second."""
        return self.env_steps / self.seconds


def _timed_rounds(step: Callable[[int], None], plan: Plan, start: int) -> Tuple[int, float]:
    """Runs rounds ``start, start+1, ...``; returns (rounds, seconds)."""
    clock = time.perf_counter
    begin = clock()
    if plan.steps is not None:
        for k in range(start, start + plan.steps):
            step(k)
        return plan.steps, clock() - begin
    deadline = begin + plan.seconds
    k = start
    while True:
        step(k)
        k += 1
        now = clock()
        if now >= deadline:
            return k - start, now - begin


def measure(build: BuildRunner, workload: str, num_envs: int, actions: Actions,
            plan: Plan) -> Measurement:
    """Builds a runner, warms it up, times it and closes it (also on errors)."""
    begin = time.perf_counter()
    runner = build(workload, num_envs, actions)
    try:
        for k in range(plan.warmup):
            runner.step(k)
        startup = time.perf_counter() - begin
        rounds, seconds = _timed_rounds(runner.step, plan, plan.warmup)
    finally:
        runner.close()
    per_round = runner.env_steps_per_round or num_envs
    return Measurement(env_steps=rounds * per_round, seconds=seconds, startup_seconds=startup)


@dataclass
class CaseResult:
    """All repeats of one backend on one (workload, num_envs) case.

    Attributes:
        workload: the workload name.
        num_envs: envs in the batch.
        backend: the backend name (a key of :data:`BACKENDS`).
        status: ``"ok"``, ``"skipped"`` or ``"error"``.
        note: why it was skipped, or the error.
        runs: the measurements, one per repeat.
    """
    workload: str
    num_envs: int
    backend: str
    status: str = "ok"
    note: str = ""
    runs: List[Measurement] = field(default_factory=list)

    @property
    def rates(self) -> List[float]:
        """Env-steps/s of each run."""
        return [m.rate for m in self.runs]

    @property
    def median(self) -> Optional[float]:
        """Median env-steps/s, ``None`` without runs."""
        return statistics.median(self.rates) if self.runs else None

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict of the result and its runs."""
        out = asdict(self)
        out["runs"] = [dict(asdict(m), rate=m.rate) for m in self.runs]
        if self.runs:
            out.update(median=self.median, min=min(self.rates), max=max(self.rates))
        return out


# -- progress bar ---------------------------------------------------------------

def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}:{seconds:02d}"


class ProgressBar:
    """A text progress bar over a known number of measurements.

    On a terminal it redraws one line; elsewhere (a log, a pipe) it writes one
    line per finished measurement.

    Args:
        total: measurements to come.
        stream: where to draw (the CLI uses stderr, so stdout keeps the tables).
        width: characters of the bar itself.
    """

    def __init__(self, total: int, stream: TextIO, width: int = 24) -> None:
        self.total = max(total, 1)
        self.done = 0
        self._stream = stream
        self._width = width
        self._tty = stream.isatty()
        self._begin = time.monotonic()
        self._drawn = False

    def _line(self, label: str) -> str:
        filled = self._width * self.done // self.total
        elapsed = time.monotonic() - self._begin
        left = (f", ~{_clock(elapsed / self.done * (self.total - self.done))} left"
                if self.done else "")
        return (f"[{'#' * filled}{'.' * (self._width - filled)}] "
                f"{self.done}/{self.total} {_clock(elapsed)}{left}  {label}")

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()

    def show(self, label: str) -> None:
        """Shows what is being measured now (terminals only)."""
        if self._tty:
            # One screen line, or the next redraw would not overwrite all of it.
            width = shutil.get_terminal_size().columns - 1
            self._write(f"\r\033[K{self._line(label)[:width]}")
            self._drawn = True

    def advance(self, label: str) -> None:
        """Counts one more measurement as done; ``label`` says what it gave."""
        self.done = min(self.done + 1, self.total)
        if self._tty:
            self.show(label)
        else:
            self._write(self._line(label) + "\n")

    def note(self, message: str) -> None:
        """Writes ``message`` on a line of its own (above the bar)."""
        self._write(("\r\033[K" if self._drawn else "") + message + "\n")
        self._drawn = False

    def close(self) -> None:
        """Ends the bar's line."""
        if self._drawn:
            self._write("\n")
            self._drawn = False


def run_case(results: Dict[str, CaseResult], plan: Plan, repeats: int,
             progress: ProgressBar) -> None:
    """Measures one case, round robin over the backends per repeat.

    Args:
        results: backend name -> its (initially empty) result for the case;
            filled in place, so an interrupted case keeps what it measured.
        plan: how long each measurement runs.
        repeats: measurements per backend.
        progress: advanced once per (backend, repeat).
    """
    backends = list(results)
    first = results[backends[0]]
    workload, num_envs = first.workload, first.num_envs
    actions = Actions.make(workload, num_envs)
    for repeat in range(repeats):
        shift = repeat % len(backends)
        for name in backends[shift:] + backends[:shift]:
            result = results[name]
            where = f"{workload} n={num_envs} {name}"
            if result.status != "ok":  # skipped or failed earlier: do not retry
                progress.advance(f"{where}: {result.status}")
                continue
            progress.show(f"{where} (repeat {repeat + 1}/{repeats})")
            try:
                run = measure(BACKENDS[name].build, workload, num_envs, actions, plan)
            except _Skip as skip:
                result.status, result.note = "skipped", str(skip)
                progress.advance(f"{where}: skipped ({skip})")
                continue
            except Exception as err:  # report, keep measuring the others
                result.status, result.note = "error", f"{type(err).__name__}: {err}"
                result.runs.clear()
                progress.note(f"{where}: ERROR {result.note}")
                progress.advance(f"{where}: error")
                continue
            result.runs.append(run)
            progress.advance(f"{where}: {run.rate:,.0f} env-steps/s")


# -- reporting ------------------------------------------------------------------

def paired_ratios(results: Sequence[CaseResult], num: str, den: str) -> List[float]:
    """Per-repeat ratios ``num / den`` of one case (repeat i against repeat i)."""
    by_name = {r.backend: r for r in results}
    a, b = by_name.get(num), by_name.get(den)
    if a is None or b is None or a.status != "ok" or b.status != "ok":
        return []
    return [x / y for x, y in zip(a.rates, b.rates)]


def _median_or_none(values: Sequence[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _fmt_ratio(value: float) -> str:
    return f"{value:.2f}"


def _fmt_spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(min(values))} - {fmt(max(values))}"


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


def rate_table(cases: Sequence[List[CaseResult]]) -> str:
    """Markdown: median env-steps/s, min-max, and the ratio to ``gym_async``."""
    rows = []
    for results in cases:
        for r in results:
            if r.runs:
                ratio = _median_or_none(paired_ratios(results, r.backend, BASELINE))
                cells = [_fmt_rate(r.median), _fmt_spread(r.rates, _fmt_rate),
                         "n/a" if ratio is None else _fmt_ratio(ratio), str(len(r.runs))]
            else:
                cells = ["not run" if r.status == "ok" else r.status, "", "", "0"]
            rows.append([r.workload, str(r.num_envs), r.backend] + cells)
    return markdown_table(["workload", "envs", "backend", "env-steps/s (median)",
                           "min - max", f"x {BASELINE}", "runs"], rows)


def ratio_table(cases: Sequence[List[CaseResult]]) -> Optional[str]:
    """Markdown: median (min-max) of the paired ratios the speed targets use.

    Only the ratios of two backends that were both asked for; ``None`` if
    there is none.
    """
    asked = {r.backend for results in cases for r in results}
    ratios_asked = [(n, d) for n, d in RATIOS if n in asked and d in asked]
    if not ratios_asked:
        return None
    rows = []
    for results in cases:
        cells = []
        for num, den in ratios_asked:
            ratios = paired_ratios(results, num, den)
            cells.append(f"{_fmt_ratio(statistics.median(ratios))} "
                         f"({_fmt_spread(ratios, _fmt_ratio)})" if ratios else "n/a")
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


def report_markdown(cases: Sequence[List[CaseResult]], plan: Plan, repeats: int,
                    extra_notes: Sequence[str] = ()) -> str:
    """The whole text report: heading, rate table, ratio table and notes."""
    budget = f"{plan.steps} batched steps" if plan.steps else f"{plan.seconds:g} s"
    parts = [
        f"# alf_env throughput: env-steps/s, {repeats} interleaved repeat(s) of "
        f"{budget} each after {plan.warmup} warm-up steps (start-up not timed); "
        f"{os.cpu_count()} CPUs",
        rate_table(cases),
    ]
    ratios = ratio_table(cases)
    if ratios is not None:
        parts += [f"Paired ratios, median (min - max) over repeats (\"x {BASELINE}\" "
                  f"above is the same for every backend; n/a: a backend was skipped or "
                  f"failed):", ratios]
    lines = [f"- note: {line}" for line in list(notes(cases)) + list(extra_notes)]
    if lines:
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


# -- plot -------------------------------------------------------------------------

WORKLOAD_TITLES = {
    "W1": "W1: trivial env (float32[4])",
    "W2": "W2: 84x84x4 uint8 frames",
    "W3": "W3: ~1 ms of CPU per step",
    "W4": "W4: 0.2-2 ms of CPU per step",
}
PLOT_TITLE = "alf_env throughput (env-steps/s vs. number of envs)"
DODGE = 0.03  # horizontal offset between backends, in log2 units of the x axis


def _compact(value: float, _position: Any = None) -> str:
    """Tick label: 1.2k, 10k, 1M."""
    for limit, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:g}{suffix}"
    return f"{value:g}"


def plot(cases: Sequence[List[CaseResult]], path: str) -> None:
    """Writes a PNG: env-steps/s against the number of envs, one line per backend.

    One panel per workload; both axes are logarithmic; the bars show the
    min-max spread of the repeats. Backends keep their colour in every panel.

    Args:
        cases: the results, as :func:`run_all` returns them.
        path: the PNG file to write.
    """
    # No pyplot: no global state, no GUI backend; the figure renders with Agg.
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter, NullLocator

    workloads = list(dict.fromkeys(results[0].workload for results in cases))
    columns = min(len(workloads), 2) or 1
    rows = -(-len(workloads) // columns) or 1
    fig = Figure(figsize=(6.0 * columns, 4.2 * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    colours = dict(zip(BACKENDS, [f"C{i}" for i in range(len(BACKENDS))]))
    drawn: Dict[str, Any] = {}
    for ax, workload in zip(axes, workloads):
        by_backend: Dict[str, List[CaseResult]] = {}
        for results in cases:
            for r in results:
                if r.workload == workload and r.runs:
                    by_backend.setdefault(r.backend, []).append(r)
        counts = sorted({r.num_envs for rs in by_backend.values() for r in rs})
        for i, (backend, rs) in enumerate(by_backend.items()):
            rs = sorted(rs, key=lambda r: r.num_envs)
            med = np.array([r.median for r in rs])
            low = med - np.array([min(r.rates) for r in rs])
            high = np.array([max(r.rates) for r in rs]) - med
            # Backends side by side around each count, so their bars do not overlap.
            dodge = 2.0 ** (DODGE * (i - (len(by_backend) - 1) / 2))
            alf = backend.startswith(("fast", "parallel"))
            drawn[backend] = ax.errorbar(
                [r.num_envs * dodge for r in rs], med, yerr=[low, high],
                color=colours[backend], marker="o" if alf else "s",
                linestyle="-" if alf else "--", capsize=3, markersize=4, linewidth=1.5)
        ax.set_title(WORKLOAD_TITLES.get(workload, workload), fontsize=11)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if counts:
            ax.set_xticks(counts, [str(c) for c in counts])
            ax.xaxis.set_minor_locator(NullLocator())
        low, high = ax.get_ylim()
        if high < 10 * low:  # within a decade, log ticks would leave it unlabelled
            ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.yaxis.set_major_formatter(FuncFormatter(_compact))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("number of envs")
        ax.set_ylabel("env-steps/s")
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[len(workloads):]:
        ax.set_visible(False)
    if drawn:
        names = [b for b in BACKENDS if b in drawn]
        fig.legend([drawn[b] for b in names],
                   [f"{b}: {BACKENDS[b].label}" for b in names],
                   loc="outside lower center", ncols=min(len(names), 2), fontsize=9)
    fig.suptitle(f"{PLOT_TITLE} - {os.cpu_count()} CPUs, {platform.machine()}")
    fig.savefig(path, format="png", dpi=100, metadata={"Title": PLOT_TITLE})


# -- leftover processes -----------------------------------------------------------

def child_pids() -> List[int]:
    """Pids of this process's live children (Linux ``/proc``; else multiprocessing's)."""
    task_dir = f"/proc/{os.getpid()}/task"
    if not os.path.isdir(task_dir):
        import multiprocessing
        return [p.pid for p in multiprocessing.active_children() if p.pid]
    pids: List[int] = []
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "children")) as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return sorted(set(pids))


def check_no_leftovers(grace_seconds: float = 2.0) -> List[int]:
    """Returns the children still alive after ``grace_seconds``; SIGTERMs them."""
    deadline = time.monotonic() + grace_seconds
    while (pids := child_pids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)  # our own child, left behind by a backend
        except ProcessLookupError:
            pass
    return pids


# -- command line -------------------------------------------------------------------

def _csv(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _int_csv(text: str) -> List[int]:
    try:
        return [int(x) for x in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def _backend_help() -> str:
    return "\n".join(f"  {name:<18} {backend.label}" for name, backend in BACKENDS.items())


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses the command line; ``--quick`` fills in the defaults it changes.

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(
        prog="alf-env-bench",
        description="Measures env-steps/s of alf_env's batched environments and of\n"
                    "gymnasium's (and SB3's) vector envs, interleaved, on the same\n"
                    "workloads; prints tables, writes JSON, markdown and a PNG plot.",
        epilog="backends:\n" + _backend_help() + "\n\nworkloads: W1 trivial, W2 84x84x4 "
               "frames, W3 ~1 ms CPU/step,\nW4 0.2-2 ms CPU/step, or a gymnasium id "
               "such as CartPole-v1.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", "--workloads", dest="workloads", type=_csv,
                        default=None, metavar="LIST",
                        help="comma-separated workloads (default: "
                             f"{','.join(FULL['workloads'])}; with --quick: "
                             f"{','.join(QUICK['workloads'])})")
    parser.add_argument("--num-envs", type=_int_csv, default=None, metavar="LIST",
                        help="comma-separated env counts for every workload (default: "
                             + "; ".join(f"{w} {','.join(map(str, n))}"
                                         for w, n in DEFAULT_NUM_ENVS.items())
                             + "; 8 for other ids; with --quick: "
                             + ",".join(map(str, QUICK["num_envs"])) + ")")
    parser.add_argument("--backends", type=_csv, default=list(BACKENDS), metavar="LIST",
                        help="comma-separated subset of the backends below (default: all)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed batched steps per measurement (default: run for "
                             "--seconds)")
    parser.add_argument("--seconds", type=float, default=None,
                        help=f"time per measurement without --steps (default "
                             f"{FULL['seconds']}; {QUICK['seconds']} with --quick)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"interleaved measurements per backend and case (default "
                             f"{FULL['repeats']}; {QUICK['repeats']} with --quick)")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"untimed batched steps after reset (default "
                             f"{FULL['warmup']}; {QUICK['warmup']} with --quick)")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"where to write {RESULTS_JSON}, {RESULTS_MD} and "
                             f"{PLOT_PNG} (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="a smaller run that takes under a minute")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown or not args.backends:
        parser.error(f"--backends: unknown {unknown}; choose from {','.join(BACKENDS)}")
    if not args.workloads:
        parser.error("--workload: give at least one workload")
    for workload in args.workloads:
        if workload not in WORKLOADS:
            try:
                gym.spec(workload)
            except gym.error.Error as err:
                parser.error(f"--workload: {workload!r} is neither one of "
                             f"{','.join(WORKLOADS)} nor a registered gymnasium id ({err})")
    if args.repeats < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--repeats and --steps must be >= 1")
    if args.num_envs is not None and (not args.num_envs or min(args.num_envs) < 1):
        parser.error("--num-envs: give env counts >= 1")
    if args.seconds <= 0 or args.warmup < 0:
        parser.error("--seconds must be > 0 and --warmup >= 0")
    return args


def cases_of(args: argparse.Namespace) -> List[Tuple[str, int]]:
    """The (workload, num_envs) cases to run, in order."""
    return [(w, n) for w in args.workloads
            for n in (args.num_envs or DEFAULT_NUM_ENVS.get(w, [8]))]


def environment_info() -> Dict[str, Any]:
    """Versions and machine facts recorded with the results."""
    info = {"alf_env": alf_env.__version__, "python": platform.python_version(),
            "torch": torch.__version__, "gymnasium": gym.__version__,
            "numpy": np.__version__, "cpus": os.cpu_count(),
            "platform": platform.platform(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if importlib.util.find_spec("stable_baselines3") is not None:
        from importlib.metadata import version
        info["stable_baselines3"] = version("stable_baselines3")
    return info


def run_all(case_list: Sequence[Tuple[str, int]], backends: Sequence[str], plan: Plan,
            repeats: int, progress: ProgressBar) -> Tuple[List[List[CaseResult]], bool]:
    """Runs every case; returns the results and whether Ctrl-C cut the run short."""
    cases: List[List[CaseResult]] = []
    try:
        for workload, num_envs in case_list:
            results = {b: CaseResult(workload, num_envs, b) for b in backends}
            cases.append(list(results.values()))
            run_case(results, plan, repeats, progress)
    except KeyboardInterrupt:  # every runner closed itself on the way out
        progress.note("interrupted; reporting what was measured")
        return cases, True
    finally:
        progress.close()
    return cases, False


def write_results(out_dir: str, cases: Sequence[List[CaseResult]], text: str,
                  meta: Dict[str, Any], all_notes: Sequence[str]) -> Dict[str, str]:
    """Writes results.json, results.md and throughput.png; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {kind: os.path.join(out_dir, name) for kind, name in
             (("json", RESULTS_JSON), ("markdown", RESULTS_MD), ("plot", PLOT_PNG))}
    results = []
    for rs in cases:
        for r in rs:
            results.append(dict(r.to_json(), **{
                f"x_{BASELINE}": _median_or_none(paired_ratios(rs, r.backend, BASELINE))}))
    report = {"meta": meta,
              "backends": {name: backend.label for name, backend in BACKENDS.items()},
              "results": results,
              "ratios": [{"workload": rs[0].workload, "num_envs": rs[0].num_envs,
                          "ratio": f"{n}/{d}", "paired": paired_ratios(rs, n, d),
                          "median": _median_or_none(paired_ratios(rs, n, d))}
                         for rs in cases for n, d in RATIOS],
              "notes": list(all_notes),
              "files": {kind: os.path.basename(p) for kind, p in paths.items()}}
    with open(paths["json"], "w") as f:
        json.dump(report, f, indent=2)
    with open(paths["markdown"], "w") as f:
        f.write(text + f"\n![throughput]({PLOT_PNG})\n")
    plot(cases, paths["plot"])
    return paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark (the ``alf-env-bench`` console script).

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).

    Returns:
        the exit status: 0, 1 (a backend failed or a worker was left
        running) or 130 (interrupted).
    """
    args = parse_args(argv)
    plan = Plan(warmup=args.warmup, steps=args.steps, seconds=args.seconds)
    case_list = cases_of(args)
    progress = ProgressBar(len(case_list) * len(args.backends) * args.repeats, sys.stderr)
    cases, interrupted = run_all(case_list, args.backends, plan, args.repeats, progress)
    leftovers = check_no_leftovers()
    extra = ([f"worker processes left running after the run (sent SIGTERM): {leftovers}"]
             if leftovers else [])
    text = report_markdown(cases, plan, args.repeats, extra)
    sys.stdout.write(text)
    if cases:
        meta = dict(environment_info(), args=vars(args), plan=asdict(plan))
        paths = write_results(args.out, cases, text, meta, notes(cases) + extra)
        sys.stdout.write(f"\nwrote {paths['json']}, {paths['markdown']}, {paths['plot']}\n")
    failed = any(r.status == "error" for results in cases for r in results)
    if interrupted:
        return 130
    return 1 if failed or leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
