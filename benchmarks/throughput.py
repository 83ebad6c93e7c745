"""Throughput benchmark: env-steps/s of several batching backends, interleaved.

What it measures
----------------
For every (workload, number of envs) case, each backend builds a batched env
of ``num_envs`` copies of the same env logic, resets it, warms up, and then
steps it with fixed, precomputed actions (the same actions for every backend)
while the clock runs; then it closes the env. Start-up, reset and warm-up are
excluded from the timing. The rate reported is *env-steps per second*
(batched steps x num_envs / seconds).

Backends:

``fast``       ``FastParallelEnvironment`` (shared memory; skipped with a note
               if it cannot be imported).
``parallel``   ``ParallelAlfEnvironment`` (pipes), envs wrapped in ``AlfGymWrapper``.
``gym_async``  ``gymnasium.vector.AsyncVectorEnv(shared_memory=True)`` (fork, like
               the alf_env backends).
``fast_vector`` ``alf_env.vector.FastVectorEnv`` (fork; the gymnasium API over the
               shared-memory workers; a drop-in for ``gym_async``).
``gym_sync``   ``gymnasium.vector.SyncVectorEnv`` (in-process; the ceiling for
               trivial envs).
``single``     one env stepped in a plain loop in this process (its rate is that
               of a single env, whatever ``num_envs`` is; it does the same number
               of env-steps as the others per measurement).

All backends auto-reset the same way (the step after the end of an episode is a
reset), so they do the same work per env-step.

Workloads (see :mod:`alf_env.workloads`): ``W1`` trivial float32[4] env (transport
overhead), ``W2`` uint8[84, 84, 4] frames (bytes moved), ``W3`` ~1 ms of CPU per
step (overlap of the workers' work), and any gymnasium id such as ``CartPole-v1``.

Measurements are interleaved: for each repeat, every backend is measured once
(round robin, in an order rotated per repeat), so machine noise hits all backends
alike. The table gives the median over repeats and the min-max spread; the ratio
table gives, per case, the median over repeats of the *paired* ratios
(``fast`` / ``gym_async`` and ``fast`` / ``single`` of the same repeat).

Run (from the repository root)::

    PYTHONPATH=. python benchmarks/throughput.py                 # everything, ~6 min
    PYTHONPATH=. python benchmarks/throughput.py --quick         # seconds per backend
    PYTHONPATH=. python benchmarks/throughput.py --workloads W1 --num-envs 8 \\
        --backends parallel,gym_async,gym_sync --repeats 5 --json w1.json

By default each measurement runs for ``--seconds`` (1.5 s; 0.3 s with
``--quick``) of whole batched steps; ``--steps N`` fixes the number of batched
steps instead. The exit status is non-zero if a backend failed (an error, not a
skip) or if a worker process was left running.
"""

import argparse
import functools
import json
import os
import platform
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.workloads import make_workload

try:
    from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
    FAST_IMPORT_ERROR: Optional[str] = None
except ImportError as err:  # the native backend may be missing or mid-rewrite
    FastParallelEnvironment = None  # type: ignore[assignment,misc]
    FAST_IMPORT_ERROR = f"{type(err).__name__}: {err}"
try:
    from alf_env.vector import FastVectorEnv
    FAST_VECTOR_IMPORT_ERROR: Optional[str] = None
except ImportError as err:
    FastVectorEnv = None  # type: ignore[assignment,misc]
    FAST_VECTOR_IMPORT_ERROR = f"{type(err).__name__}: {err}"

DEFAULT_NUM_ENVS: Dict[str, List[int]] = {
    "W1": [2, 4, 8, 16],
    "W2": [4, 8, 16],
    "W3": [2, 4, 8],
    "CartPole-v1": [8],
}
ALL_BACKENDS = ("fast", "fast_vector", "parallel", "gym_async", "gym_sync", "single")
NUM_ACTIONS = 64  # distinct precomputed batched actions, cycled through
ACTION_SEED = 0


# -- runners: one per backend, all with the same shape ------------------------

class Runner(NamedTuple):
    """A started, reset env ready to be stepped.

    Attributes:
        step: ``step(k)`` does one round with precomputed action ``k``: one
            batched step (``num_envs`` env-steps) for the batched backends,
            ``num_envs`` env-steps of the one env for ``single``.
        close: releases everything the runner started; idempotent.
    """
    step: Callable[[int], None]
    close: Callable[[], None]


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


def _alf_env(workload: str, env_id: int = 0) -> AlfGymWrapper:
    """Workload ``workload`` as an ALF environment (a picklable constructor)."""
    return AlfGymWrapper(make_workload(workload, env_id), env_id=env_id)


def _alf_runner(env_class: Any, workload: str, num_envs: int, actions: Actions) -> Runner:
    """Runner over ``ParallelAlfEnvironment`` or a class with the same constructor."""
    ctors = [functools.partial(_alf_env, workload) for _ in range(num_envs)]
    env = env_class(ctors)
    try:
        env.reset()
    except BaseException:
        env.close()
        raise
    batches = actions.torch
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close)


def _fast_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    if FastParallelEnvironment is None:
        raise _Skip(f"cannot import FastParallelEnvironment ({FAST_IMPORT_ERROR})")
    return _alf_runner(FastParallelEnvironment, workload, num_envs, actions)


def _gym_vector_runner(make_vector: Callable[[List[Callable[[], gym.Env]]], gym.vector.VectorEnv],
                       workload: str, num_envs: int, actions: Actions) -> Runner:
    """Runner over a gymnasium vector env built by ``make_vector(env_fns)``."""
    env_fns = [functools.partial(make_workload, workload, i) for i in range(num_envs)]
    env = make_vector(env_fns)
    try:
        env.reset(seed=ACTION_SEED)
    except BaseException:
        env.close()
        raise
    batches = actions.numpy
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close)


def _fast_vector_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    if FastVectorEnv is None:
        raise _Skip(f"cannot import FastVectorEnv ({FAST_VECTOR_IMPORT_ERROR})")
    return _gym_vector_runner(lambda fns: FastVectorEnv(fns, context="fork"),
                              workload, num_envs, actions)


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

# The one table of backends: name -> builder(workload, num_envs, actions).
BACKENDS: Dict[str, BuildRunner] = {
    "fast": _fast_runner,
    "parallel": functools.partial(_alf_runner, ParallelAlfEnvironment),
    "fast_vector": _fast_vector_runner,
    "gym_async": functools.partial(
        _gym_vector_runner,
        lambda fns: gym.vector.AsyncVectorEnv(fns, shared_memory=True, context="fork")),
    "gym_sync": functools.partial(_gym_vector_runner, gym.vector.SyncVectorEnv),
    "single": _single_runner,
}


class _Skip(Exception):
    """A backend that cannot run here (reported as skipped, not as an error)."""


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
    return Measurement(env_steps=rounds * num_envs, seconds=seconds, startup_seconds=startup)


@dataclass
class CaseResult:
    """All repeats of one backend on one (workload, num_envs) case."""
    workload: str
    num_envs: int
    backend: str
    status: str = "ok"  # "ok", "skipped" or "error"
    note: str = ""
    runs: List[Measurement] = field(default_factory=list)

    @property
    def rates(self) -> List[float]:
        return [m.rate for m in self.runs]

    def to_json(self) -> Dict[str, Any]:
        out = asdict(self)
        out["runs"] = [dict(asdict(m), rate=m.rate) for m in self.runs]
        if self.runs:
            out.update(median=statistics.median(self.rates), min=min(self.rates),
                       max=max(self.rates))
        return out


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_case(results: Dict[str, CaseResult], plan: Plan, repeats: int) -> None:
    """Measures one case, round robin over the backends per repeat.

    Args:
        results: backend name -> its (initially empty) result for the case;
            filled in place, so an interrupted case keeps what it measured.
        plan: how long each measurement runs.
        repeats: measurements per backend.
    """
    backends = list(results)
    first = results[backends[0]]
    workload, num_envs = first.workload, first.num_envs
    actions = Actions.make(workload, num_envs)
    for repeat in range(repeats):
        shift = repeat % len(backends)
        for name in list(backends[shift:]) + list(backends[:shift]):
            result = results[name]
            if result.status != "ok":
                continue  # skipped or failed earlier: do not retry every repeat
            try:
                run = measure(BACKENDS[name], workload, num_envs, actions, plan)
            except _Skip as skip:
                result.status, result.note = "skipped", str(skip)
                _progress(f"  {workload} n={num_envs} {name}: skipped ({skip})")
                continue
            except Exception as err:  # report, keep measuring the others
                result.status, result.note = "error", f"{type(err).__name__}: {err}"
                result.runs.clear()
                _progress(f"  {workload} n={num_envs} {name}: ERROR {result.note}")
                continue
            result.runs.append(run)
            _progress(f"  {workload} n={num_envs} repeat {repeat + 1}/{repeats} "
                      f"{name}: {run.rate:,.0f} env-steps/s ({run.env_steps} in "
                      f"{run.seconds:.2f} s; start-up + warm-up {run.startup_seconds:.2f} s)")


# -- reporting ------------------------------------------------------------------

RATIOS = (("fast", "gym_async"), ("fast", "single"))


def paired_ratios(results: Sequence[CaseResult], num: str, den: str) -> List[float]:
    """Per-repeat ratios ``num / den`` of one case (repeat i against repeat i)."""
    by_name = {r.backend: r for r in results}
    a, b = by_name.get(num), by_name.get(den)
    if a is None or b is None or a.status != "ok" or b.status != "ok":
        return []
    return [x / y for x, y in zip(a.rates, b.rates)]


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _fmt_spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(min(values))} – {fmt(max(values))}"


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def rate_table(cases: Sequence[List[CaseResult]]) -> str:
    """Markdown: median env-steps/s and min-max spread per case and backend."""
    rows = []
    for results in cases:
        for r in results:
            if r.runs:
                rel = (max(r.rates) - min(r.rates)) / statistics.median(r.rates)
                cells = [_fmt_rate(statistics.median(r.rates)),
                         _fmt_spread(r.rates, _fmt_rate), f"{100 * rel:.0f}%", str(len(r.runs))]
            else:
                cells = ["not run" if r.status == "ok" else r.status, "", "", "0"]
            rows.append([r.workload, str(r.num_envs), r.backend] + cells)
    return _markdown(["workload", "envs", "backend", "median env-steps/s",
                      "min – max", "spread", "runs"], rows)


def ratio_table(cases: Sequence[List[CaseResult]]) -> str:
    """Markdown: median (min-max) of the paired ratios the targets use."""
    def fmt(x: float) -> str:
        return f"{x:.2f}"

    rows = []
    for results in cases:
        cells = []
        for num, den in RATIOS:
            ratios = paired_ratios(results, num, den)
            cells.append(f"{fmt(statistics.median(ratios))} ({_fmt_spread(ratios, fmt)})"
                         if ratios else "n/a")
        rows.append([results[0].workload, str(results[0].num_envs)] + cells)
    return _markdown(["workload", "envs"] + [f"{n} / {d}" for n, d in RATIOS], rows)


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


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=_csv, default=list(DEFAULT_NUM_ENVS),
                        help="comma-separated: W1,W2,W3 and/or gymnasium ids "
                             "(default: %(default)s)")
    parser.add_argument("--num-envs", type=lambda s: [int(x) for x in _csv(s)], default=None,
                        help="comma-separated env counts for every workload (default: "
                             + "; ".join(f"{w} {'/'.join(map(str, n))}"
                                         for w, n in DEFAULT_NUM_ENVS.items())
                             + "; 8 for other gymnasium ids)")
    parser.add_argument("--backends", type=_csv, default=list(ALL_BACKENDS),
                        help="comma-separated subset of " + ",".join(ALL_BACKENDS))
    parser.add_argument("--steps", type=int, default=None,
                        help="timed batched steps per measurement (default: run for "
                             "--seconds)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="time budget per measurement when --steps is not given "
                             "(default 1.5; 0.3 with --quick)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="measurements per backend and case (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed batched steps after reset (default 50; 10 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="short measurements: a few seconds per backend and case")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write all measurements to FILE")
    args = parser.parse_args(argv)
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown or not args.backends:
        parser.error(f"--backends: unknown {unknown}; choose from {','.join(ALL_BACKENDS)}")
    if args.repeats < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--repeats and --steps must be >= 1")
    if args.seconds is None:
        args.seconds = 0.3 if args.quick else 1.5
    if args.warmup is None:
        args.warmup = 10 if args.quick else 50
    return args


def cases_of(args: argparse.Namespace) -> List[Tuple[str, int]]:
    """The (workload, num_envs) cases to run, in order."""
    return [(w, n) for w in args.workloads
            for n in (args.num_envs or DEFAULT_NUM_ENVS.get(w, [8]))]


def environment_info() -> Dict[str, Any]:
    return {"python": platform.python_version(), "torch": torch.__version__,
            "gymnasium": gym.__version__, "numpy": np.__version__,
            "cpus": os.cpu_count(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    plan = Plan(warmup=args.warmup, steps=args.steps, seconds=args.seconds)
    cases: List[List[CaseResult]] = []
    interrupted = False
    try:
        for workload, num_envs in cases_of(args):
            _progress(f"{workload}, {num_envs} envs:")
            results = {b: CaseResult(workload, num_envs, b) for b in args.backends}
            cases.append(list(results.values()))
            run_case(results, plan, args.repeats)
    except KeyboardInterrupt:  # every runner closed itself on the way out
        interrupted = True
        _progress("interrupted; reporting what was measured")
    leftovers = check_no_leftovers()

    budget = f"{args.steps} batched steps" if args.steps else f"{args.seconds:g} s"
    print(f"# alf_env throughput (env-steps/s; {args.repeats} interleaved repeats of "
          f"{budget} each, after {args.warmup} warm-up steps; start-up not timed)\n")
    print(rate_table(cases) + "\n")
    print("Paired ratios, median (min – max) over repeats (n/a: a backend was not "
          "run, skipped or failed):\n")
    print(ratio_table(cases) + "\n")
    all_notes = notes(cases)
    if leftovers:
        all_notes.append(f"worker processes left running after the run (sent SIGTERM): "
                         f"{leftovers}")
    for line in all_notes:
        print(f"- note: {line}")

    if args.json:
        report = {"meta": dict(environment_info(), args=vars(args)),
                  "results": [r.to_json() for results in cases for r in results],
                  "ratios": [{"workload": rs[0].workload, "num_envs": rs[0].num_envs,
                              "ratio": f"{n}/{d}", "paired": paired_ratios(rs, n, d)}
                             for rs in cases for n, d in RATIOS],
                  "notes": all_notes}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    failed = any(r.status == "error" for results in cases for r in results)
    if interrupted:
        return 130
    return 1 if failed or leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
