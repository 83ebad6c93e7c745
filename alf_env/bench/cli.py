"""The ``alf-env-bench`` command line: arguments, the run, the files it writes."""

import argparse
import importlib.util
import json
import os
import platform
import signal
import sys
import time
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np

import alf_env
from alf_env.bench import timings as bench_timings
from alf_env.bench import tune
from alf_env.bench import workloads as bench_workloads
from alf_env.bench.backends import BACKENDS
from alf_env.bench.core import CaseResult, Plan
from alf_env.bench.loads import POLICIES, BusyLoad, make_policy
from alf_env.bench.measure import ProgressBar, run_all
from alf_env.bench.once_stderr import OnceStderr
from alf_env.bench.plot import (
    plot,
    plot_ratios,
    plot_step_cost,
    plot_workload,
    scaling_workloads,
    step_cost_counts,
    workload_png,
)
from alf_env.bench.report import (
    RATIOS,
    REFERENCE_COLUMNS,
    fill,
    median_or_none,
    notes,
    paired_ratios,
    ratio_summary,
    report_markdown,
    terminal_report,
    verdict,
)
from alf_env.control_plane.affinity import usable_cpu_count

#: What ``--quick`` runs: the defaults it changes. Its workloads whose packages are
#: missing are left out. Five repeats, so that one noisy repeat rarely moves a median
#: (above the ceiling row, say). Under 3 minutes on 2 cores: 6 cases x 6 backends x 5
#: repeats, less EnvPool on the 3 synthetic cases (skipped at once) = 165 measurements
#: of 0.3 s. Around each, ~0.2 s to start and close processes; Pong's 8 envs take
#: ~0.4 s of CPU each to build (~1.6 s in two workers, 3.2 s in SyncVectorEnv's
#: process), ~2 s a measurement. 135 x 0.5 s + 30 x 2.3 s = 137 s, and some 15 s of
#: imports and plots.
QUICK: Dict[str, Any] = {
    "workloads": ["W1", "W3", "CartPole-v1", "HalfCheetah-v5", "Pong"],
    "num_envs": {"W1": [2, 8]},  # 8 for the others
    "backends": ["fast", "fast_vector", "gym_async", "gym_sync", "ceiling", "envpool"],
    "repeats": 5, "seconds": 0.3, "warmup": 10}
#: The defaults of a full run (env counts: each workload's own).
FULL: Dict[str, Any] = {
    "workloads": list(bench_workloads.WORKLOADS), "num_envs": None,
    "backends": list(BACKENDS), "repeats": 3, "seconds": 1.5, "warmup": 50}
#: What ``--env`` is measured against by default.
ENV_BACKENDS = ("fast_vector", "gym_sync", "gym_async", "pufferlib", "envpool", "ceiling")
#: Envs of ``--env`` without ``--num-envs``.
ENV_NUM_ENVS = 8
DEFAULT_OUT = "bench_out"
TUNE_JSON = "tune.json"
RESULTS_JSON, RESULTS_MD = "results.json", "results.md"
PLOT_PNG, RATIO_PNG, STEP_COST_PNG = "throughput.png", "ratios.png", "step_cost.png"
#: Versions recorded with the results, when installed: import name -> distribution.
PACKAGES = {"stable_baselines3": "stable_baselines3", "mujoco": "mujoco",
            "ale_py": "ale_py", "envpool": "envpool", "ray": "ray",
            "pufferlib": "pufferlib-core"}


#: Helper processes multiprocessing keeps for the whole session by design
#: (started by a backend that uses forkserver); not leftovers.
SESSION_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def _is_session_helper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return any(helper in cmdline for helper in SESSION_HELPERS)


def child_pids() -> List[int]:
    """Pids of this process's live children but multiprocessing's session helpers
    (Linux ``/proc``; else multiprocessing's children)."""
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
    return sorted(pid for pid in set(pids) if not _is_session_helper(pid))


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


def _csv(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _int_csv(text: str) -> List[int]:
    try:
        return [int(x) for x in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None


def _backend_help() -> str:
    return "\n".join(f"  {name:<19} {backend.name}" + (
        f" ({backend.label})" if backend.label != backend.name else "")
        for name, backend in BACKENDS.items())


def _workload_help() -> str:
    lines = [f"  {name:<19} {w.title}" for name, w in bench_workloads.WORKLOADS.items()]
    return "\n".join(lines + [f"  {bench_workloads.SWEEP:<19} all of "
                              f"{','.join(bench_workloads.SWEEP_NAMES)}",
                              "  or any registered gymnasium id"])


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses the command line; ``--quick`` fills in the defaults it changes.

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(
        prog="alf-env-bench",
        description="Measures env-steps/s of alf_env's batched environments and of\n"
                    "gymnasium's, SB3's and EnvPool's, interleaved, on the same\n"
                    "workloads; prints tables, writes JSON, markdown and PNG plots.",
        epilog="backends:\n" + _backend_help() + "\n\nworkloads:\n" + _workload_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", "--workloads", dest="workloads", type=_csv,
                        default=None, metavar="LIST",
                        help="comma-separated workloads (default: all; with --quick: "
                             f"{','.join(QUICK['workloads'])} when installed)")
    parser.add_argument("--num-envs", type=_int_csv, default=None, metavar="LIST",
                        help="comma-separated env counts for every workload (default: "
                             "W1 2,4,8,16; W2 4,8,16; W3 2,4,8; 8 for the others; "
                             "with --quick: W1 2,8, 8 for the others)")
    parser.add_argument("--backends", type=_csv, default=None, metavar="LIST",
                        help="comma-separated subset of the backends below (default: all; "
                             f"with --quick: {','.join(QUICK['backends'])})")
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
                        help=f"where to write {RESULTS_JSON}, {RESULTS_MD} and the plots: "
                             f"workload_<name>.png per workload, {PLOT_PNG} (workloads at "
                             f"several env counts) and {RATIO_PNG} (default: %(default)s)")
    parser.add_argument("--markdown", default=None, metavar="PATH",
                        help="where to write the full tables (every backend, every figure, "
                             "the paired ratios), which the terminal leaves out (default: "
                             f"DIR/{RESULTS_MD})")
    parser.add_argument("--quick", action="store_true",
                        help="a smaller run that takes under three minutes")
    parser.add_argument("--env", default=None, metavar="ENV",
                        help="your env: a registered gymnasium id or module:function "
                             "(function() returns a gymnasium.Env; the module must be "
                             "importable, e.g. on PYTHONPATH); measured against "
                             f"{','.join(ENV_BACKENDS)} unless --backends says otherwise")
    parser.add_argument("--tune", action="store_true",
                        help="with --env: try the FastVectorEnv layouts that suit the env "
                             "and this machine (workers, placement, lockstep or "
                             "EnvPool-style; with --load N also beside N busy processes) "
                             "next to SyncVectorEnv and the other alternatives, and print "
                             "the fastest choice as a line to paste (SyncVectorEnv where "
                             "stepping in this process is faster; both lines when there "
                             "is no clear winner)")
    parser.add_argument("--timings", action="store_true",
                        help="with --env: only print where a FastVectorEnv's steps spend "
                             "their time on the env (FastVectorEnv.timings(): each env's "
                             "step, the straggler spread, the hand-off), stepping it "
                             "for --seconds (default "
                             f"{bench_timings.DEFAULT_SECONDS:g}); --env without it "
                             "prints this after its comparison")
    parser.add_argument("--budget-s", type=float, default=tune.DEFAULT_BUDGET_S,
                        metavar="S", help="--tune's time budget in seconds (default: "
                                          "%(default)s)")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="N busy-loop processes run beside every measurement, as "
                             "on a machine shared with other work (default: 0)")
    parser.add_argument("--policy", choices=POLICIES, default="none",
                        help="'mlp': a torch MLP policy's forward pass (2 x 256, Tanh) "
                             "on every batch of observations, as in a training loop "
                             "(default: none)")
    parser.add_argument("--torch-threads", type=int, default=None, metavar="N",
                        help="torch.set_num_threads(N) for --policy (default: torch's "
                             "own default, as in a training script)")
    args = parser.parse_args(argv)
    if args.env is not None:
        if args.workloads is not None:
            parser.error("--env: give --env or --workload, not both")
        args.workloads = [args.env]
        if args.backends is None:
            args.backends = list(ENV_BACKENDS)
    elif args.tune:
        parser.error("--tune: name the env to tune with --env")
    elif args.timings:
        parser.error("--timings: name the env with --env")
    if args.tune and args.timings:
        parser.error("--timings: give --tune or --timings, not both")
    args.timings_seconds = (bench_timings.DEFAULT_SECONDS if args.seconds is None
                            else args.seconds)
    if args.budget_s <= 0:
        parser.error("--budget-s: give a number of seconds > 0")
    quick_workloads = args.quick and args.workloads is None
    for name, value in (QUICK if args.quick else FULL).items():
        if name != "num_envs" and getattr(args, name) is None:
            setattr(args, name, list(value) if isinstance(value, list) else value)
    if quick_workloads:  # --quick leaves out what is not installed
        args.workloads = [w for w in args.workloads if not bench_workloads.missing_packages(w)]
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown or not args.backends:
        parser.error(f"--backends: unknown {unknown}; choose from {','.join(BACKENDS)}")
    args.workloads = bench_workloads.expand(args.workloads)
    if not args.workloads:
        parser.error("--workload: give at least one workload")
    for workload in args.workloads:
        try:
            bench_workloads.get(workload)
        except ValueError as err:
            parser.error(f"--workload: {err}")
    if args.repeats < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--repeats and --steps must be >= 1")
    if args.num_envs is not None and (not args.num_envs or min(args.num_envs) < 1):
        parser.error("--num-envs: give env counts >= 1")
    if args.seconds <= 0 or args.warmup < 0:
        parser.error("--seconds must be > 0 and --warmup >= 0")
    if args.load < 0:
        parser.error("--load: give a number of busy processes >= 0")
    if args.torch_threads is not None and args.torch_threads < 1:
        parser.error("--torch-threads: give a thread count >= 1")
    return args


def cases_of(args: argparse.Namespace) -> List[Tuple[str, int]]:
    """The (workload, num_envs) cases to run, in order."""
    def counts(workload: str) -> Sequence[int]:
        if args.num_envs:
            given: Sequence[int] = args.num_envs
            return given
        if args.env is not None:
            return [ENV_NUM_ENVS]
        if args.quick:
            quick: Sequence[int] = QUICK["num_envs"].get(workload, [8])
            return quick
        entry = bench_workloads.WORKLOADS.get(workload)
        return entry.num_envs if entry else [8]

    return [(w, n) for w in args.workloads for n in counts(w)]


def environment_info() -> Dict[str, Any]:
    """Versions and machine facts recorded with the results."""
    info = {"alf_env": alf_env.__version__, "python": platform.python_version(),
            "torch": version("torch"), "gymnasium": gym.__version__,
            "numpy": np.__version__, "cpus": os.cpu_count(), "usable_cpus": usable_cpu_count(),
            "platform": platform.platform(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for package, distribution in PACKAGES.items():
        if importlib.util.find_spec(package) is not None:
            try:
                info[package] = version(distribution)
            except PackageNotFoundError:  # importable, but not installed by pip
                info[package] = "unknown"
    return info


def conditions(args: argparse.Namespace) -> Dict[str, Any]:
    """What ran beside the envs: busy processes, the policy and torch's threads."""
    out: Dict[str, Any] = {"load": args.load, "policy": args.policy}
    if args.policy != "none":
        import torch

        out["torch_threads"] = torch.get_num_threads()
    return out


def results_json(cases: Sequence[List[CaseResult]]) -> List[Dict[str, Any]]:
    """Every result with its paired ratios to the reference rows."""
    out = []
    for rs in cases:
        for r in rs:
            entry = r.to_json()
            for ref, _ in REFERENCE_COLUMNS:
                paired = paired_ratios(rs, r.backend, ref)
                entry[f"x_{ref}"] = median_or_none(paired)
                entry[f"x_{ref}_spread"] = ratio_summary(paired)
            out.append(entry)
    return out


def write_results(out_dir: str, cases: Sequence[List[CaseResult]], text: str,
                  meta: Dict[str, Any], all_notes: Sequence[str],
                  markdown_path: Optional[str] = None,
                  conclusion: str = "") -> Dict[str, Any]:
    """Writes results.json, the markdown tables and the plots; returns their paths.

    Args:
        out_dir: the folder of the JSON and the plots.
        text: the markdown (:func:`~alf_env.bench.report.report_markdown`).
        markdown_path: where the markdown goes (default: ``out_dir/results.md``);
            its image links are relative to it.
        conclusion: the verdict, recorded in the JSON.

    The plots: ``ratios.png``, one ``workload_<name>.png`` per workload,
    ``throughput.png`` when a workload was measured at several env counts, and
    ``step_cost.png`` when several sweep workloads were measured at one.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths: Dict[str, Any] = {kind: os.path.join(out_dir, name) for kind, name in
                             (("json", RESULTS_JSON), ("ratio_plot", RATIO_PNG))}
    paths["markdown"] = markdown_path or os.path.join(out_dir, RESULTS_MD)
    if scaling_workloads(cases):
        paths["plot"] = os.path.join(out_dir, PLOT_PNG)
    if step_cost_counts(cases):
        paths["step_cost_plot"] = os.path.join(out_dir, STEP_COST_PNG)
    workloads = list(dict.fromkeys(rs[0].workload for rs in cases))
    paths["workload_plots"] = {w: os.path.join(out_dir, workload_png(w)) for w in workloads}
    files: Dict[str, Any] = {kind: (os.path.basename(p) if isinstance(p, str)
                                    else {w: os.path.basename(q) for w, q in p.items()})
                             for kind, p in paths.items()}
    report = {"meta": meta,
              "backends": {name: backend.label for name, backend in BACKENDS.items()},
              "names": {name: backend.name for name, backend in BACKENDS.items()},
              "workloads": {name: w.title for name, w in bench_workloads.WORKLOADS.items()},
              "results": results_json(cases),
              "ratios": [{"workload": rs[0].workload, "num_envs": rs[0].num_envs,
                          "ratio": f"{n}/{d}", "paired": paired_ratios(rs, n, d),
                          "median": median_or_none(paired_ratios(rs, n, d))}
                         for rs in cases for n, d in RATIOS],
              "notes": list(all_notes),
              "verdict": conclusion,
              "files": files}
    with open(paths["json"], "w") as f:
        json.dump(report, f, indent=2)
    images = [(w, paths["workload_plots"][w]) for w in workloads]
    if "plot" in paths:
        images.append(("throughput", paths["plot"]))
    if "step_cost_plot" in paths:
        images.append(("step cost", paths["step_cost_plot"]))
    images.append(("ratios", paths["ratio_plot"]))
    markdown_dir = os.path.dirname(os.path.abspath(paths["markdown"]))
    os.makedirs(markdown_dir, exist_ok=True)
    with open(paths["markdown"], "w") as f:
        f.write(text + "".join(
            f"\n![{alt}]({os.path.relpath(os.path.abspath(path), markdown_dir)})\n"
            for alt, path in images))
    for workload, path in paths["workload_plots"].items():
        plot_workload(cases, workload, path)
    if "plot" in paths:
        plot(cases, paths["plot"])
    if "step_cost_plot" in paths:
        plot_step_cost(cases, paths["step_cost_plot"])
    plot_ratios(cases, paths["ratio_plot"])
    return paths


def written(paths: Dict[str, Any]) -> str:
    """The lines that say where the files went, wrapped to the terminal report's width."""
    plots = [*paths["workload_plots"].values(),
             *(paths[kind] for kind in ("plot", "step_cost_plot") if kind in paths),
             paths["ratio_plot"]]
    return "\n".join([
        fill(f"Every backend, every figure and the paired ratios: {paths['markdown']}"),
        fill(f"Every measurement: {paths['json']}"),
        fill(f"Plots: {', '.join(plots)}", "  ")]) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark (the ``alf-env-bench`` console script).

    Prints a short table per case, fastest first, and ends with the verdict: the
    fastest choice per case (:func:`~alf_env.bench.report.verdict`); the full
    tables go to ``results.md``.

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).

    Returns:
        the exit status: 0, 1 (a backend failed or a worker was left
        running) or 130 (interrupted).
    """
    args = parse_args(argv)
    if args.tune:
        return main_tune(args)
    if args.timings:
        return main_timings(args)
    plan = Plan(warmup=args.warmup, steps=args.steps, seconds=args.seconds)
    case_list = cases_of(args)
    policy = make_policy(args.policy, args.torch_threads)
    with OnceStderr() as once, BusyLoad(args.load):
        progress = ProgressBar(len(case_list) * len(args.backends) * args.repeats,
                               once.stream or sys.stderr)
        cases, interrupted = run_all(case_list, args.backends, plan, args.repeats, progress,
                                     policy)
    leftovers = check_no_leftovers()  # the load's processes are reaped by now
    extra = ([f"worker processes left running after the run (sent SIGTERM): {leftovers}"]
             if leftovers else [])
    sys.stdout.write(terminal_report(cases, plan, args.repeats, extra, conditions(args)))
    conclusion = verdict(cases, args.repeats)
    if cases:
        meta = dict(environment_info(), args=vars(args), plan=asdict(plan),
                    conditions=conditions(args))
        paths = write_results(args.out, cases,
                              report_markdown(cases, plan, args.repeats, extra,
                                              conditions(args)),
                              meta, notes(cases) + extra, args.markdown, conclusion)
        sys.stdout.write("\n" + written(paths))
    failed = any(r.status == "error" for results in cases for r in results)
    status = 1 if failed or leftovers else 0
    if interrupted:
        status = 130
    elif args.env is not None and main_timings(args) != 0:
        status = 1
    if conclusion:
        sys.stdout.write("\n" + conclusion)
    return status


def main_timings(args: argparse.Namespace) -> int:
    """``--env ENV [--timings]``: steps a default FastVectorEnv of the env and prints
    where its steps' time goes (:mod:`alf_env.bench.timings`)."""
    num_envs = (args.num_envs or [ENV_NUM_ENVS])[0]
    try:
        taken, steps = bench_timings.measure(args.env, num_envs, args.timings_seconds)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    sys.stdout.write(bench_timings.report(args.env, num_envs, taken, steps))
    leftovers = check_no_leftovers()
    if leftovers:
        sys.stdout.write(f"worker processes left running after the run (sent SIGTERM): "
                         f"{leftovers}\n")
    return 1 if leftovers else 0


def main_tune(args: argparse.Namespace) -> int:
    """``--env ENV --tune``: measures the layouts, prints the table and the line to paste."""
    num_envs = (args.num_envs or [ENV_NUM_ENVS])[0]
    policy = make_policy(args.policy, args.torch_threads)
    with OnceStderr() as once:
        try:
            tuned = tune.tune(args.env, num_envs, usable_cpu_count(), args.budget_s, args.load,
                              once.stream or sys.stderr, policy)
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            return 130
    leftovers = check_no_leftovers()
    sys.stdout.write(tune.report(tuned))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, TUNE_JSON)
    with open(path, "w") as f:
        json.dump(dict(tuned, meta=environment_info()), f, indent=2)
    sys.stdout.write("\n" + fill(f"Every measurement: {path}") + "\n")
    if leftovers:
        sys.stdout.write(fill(f"worker processes left running after the run (sent SIGTERM): "
                              f"{leftovers}") + "\n")
    return 1 if leftovers else 0
