"""Measuring: timed rounds, the interleaved repeats of one case, the progress bar."""

import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

from alf_env.bench.backends import BACKENDS, BuildRunner, display_name
from alf_env.bench.core import Actions, CaseResult, Measurement, Plan, Skip
from alf_env.bench.loads import observation_of
from alf_env.bench.workloads import missing_note

#: What runs on each batch of observations between steps (``--policy``).
Policy = Callable[[Any], None]


def with_policy(step: Callable[[int], Any], policy: Optional[Policy]) -> Callable[[int], Any]:
    """``step`` followed by ``policy`` on the observations it returned."""
    if policy is None:
        return step

    def step_and_act(k: int) -> None:
        policy(observation_of(step(k)))

    return step_and_act


def _timed_rounds(step: Callable[[int], Any], plan: Plan, start: int) -> Tuple[int, float]:
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
            plan: Plan, policy: Optional[Policy] = None) -> Measurement:
    """Builds a runner, warms it up, times it and closes it (also on errors).

    With ``policy``, every round is the step and then ``policy`` on the
    observations it returned (runners that time themselves, and ``single``,
    which returns none, run without it).
    """
    begin = time.perf_counter()
    runner = build(workload, num_envs, actions)
    try:
        if runner.timed is not None:
            env_steps, seconds = runner.timed(plan)
            return Measurement(env_steps=env_steps, seconds=seconds,
                               startup_seconds=time.perf_counter() - begin - seconds)
        step = with_policy(runner.step, policy)
        for k in range(plan.warmup):
            step(k)
        startup = time.perf_counter() - begin
        rounds, seconds = _timed_rounds(step, plan, plan.warmup)
    finally:
        runner.close()
    per_round = runner.env_steps_per_round or num_envs
    return Measurement(env_steps=rounds * per_round, seconds=seconds, startup_seconds=startup)


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


def _skip_case(results: Dict[str, CaseResult], status: str, note: str, repeats: int,
               progress: ProgressBar) -> None:
    """Marks every backend of a case that cannot run at all."""
    for name, result in results.items():
        result.status, result.note = status, note
        for _ in range(repeats):
            progress.advance(f"{result.workload} n={result.num_envs} {display_name(name)}: "
                             f"{status}")


def run_case(results: Dict[str, CaseResult], plan: Plan, repeats: int,
             progress: ProgressBar, policy: Optional[Policy] = None,
             builders: Optional[Dict[str, BuildRunner]] = None) -> None:
    """Measures one case, round robin over the backends per repeat.

    Args:
        results: backend name -> its (initially empty) result for the case;
            filled in place, so an interrupted case keeps what it measured.
        plan: how long each measurement runs.
        repeats: measurements per backend.
        progress: advanced once per (backend, repeat).
        policy: run on every batch of observations (``--policy``).
        builders: backend name -> its build function, for names that are not
            in ``BACKENDS`` (the layouts of ``--tune``).
    """
    builders = builders or {}
    backends = list(results)
    first = results[backends[0]]
    workload, num_envs = first.workload, first.num_envs
    missing = missing_note(workload)
    if missing is not None:
        _skip_case(results, "skipped", missing, repeats, progress)
        return
    try:
        actions = Actions.make(workload, num_envs)
    except Exception as err:  # noqa: BLE001 -- the workload does not build: every row says so
        _skip_case(results, "error", f"{type(err).__name__}: {err}", repeats, progress)
        progress.note(f"{workload}: ERROR {first.note}")
        return
    for repeat in range(repeats):
        shift = repeat % len(backends)
        for name in backends[shift:] + backends[:shift]:
            result = results[name]
            where = f"{workload} n={num_envs} {display_name(name)}"
            if result.status != "ok":  # skipped or failed earlier: do not retry
                progress.advance(f"{where}: {result.status}")
                continue
            progress.show(f"{where} (repeat {repeat + 1}/{repeats})")
            try:
                build = builders[name] if name in builders else BACKENDS[name].build
                run = measure(build, workload, num_envs, actions, plan, policy)
            except Skip as skip:
                result.status, result.note = "skipped", str(skip)
                progress.advance(f"{where}: skipped ({skip})")
                continue
            except Exception as err:  # noqa: BLE001 -- report, keep measuring the others
                result.status, result.note = "error", f"{type(err).__name__}: {err}"
                result.runs.clear()
                progress.note(f"{where}: ERROR {result.note}")
                progress.advance(f"{where}: error")
                continue
            result.runs.append(run)
            progress.advance(f"{where}: {run.rate:,.0f} env-steps/s")


def run_all(case_list: Sequence[Tuple[str, int]], backends: Sequence[str], plan: Plan,
            repeats: int, progress: ProgressBar,
            policy: Optional[Policy] = None) -> Tuple[List[List[CaseResult]], bool]:
    """Runs every case; returns the results and whether Ctrl-C cut the run short.

    Each backend's ``teardown`` runs once at the end, also when interrupted.
    """
    cases: List[List[CaseResult]] = []
    try:
        for workload, num_envs in case_list:
            results = {b: CaseResult(workload, num_envs, b) for b in backends}
            cases.append(list(results.values()))
            run_case(results, plan, repeats, progress, policy)
    except KeyboardInterrupt:  # every runner closed itself on the way out
        progress.note("interrupted; reporting what was measured")
        return cases, True
    finally:
        progress.close()
        for name in backends:
            teardown = BACKENDS[name].teardown
            if teardown is not None:
                teardown()
    return cases, False
