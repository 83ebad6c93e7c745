"""The full training-loop run behind ``docs/results/training_loop.json``, and every
figure the user pages quote from it.

README.md, docs/choosing.rst, docs/benchmarks.md and docs/training.rst quote
figures only inside blocks generated here from the results file alone, between
``<!-- training_loop: NAME -->`` and ``<!-- /training_loop: NAME -->`` lines
(``.. training_loop: NAME`` comments in reStructuredText), so a new run changes
every figure by one command; ``tests/test_doc_figures.py`` fails on a figure
outside a block.

* ``run DIR``: every run of the file, each by ``benchmarks/launch_spread.py``
  in fresh processes, one JSON per run in ``DIR``; a run whose JSON is already
  there is kept, so an interrupted run resumes. Nothing else may run on the
  machine meanwhile (about 70 minutes on 2 CPUs).
* ``assemble DIR``: the results file from ``DIR``'s runs, with the machine, the
  package versions and the commit the runs measured.
* ``tables``: rewrites the generated blocks from the results file;
  ``--check`` only says which are stale (exit status 1).

Run:  python benchmarks/training_loop.py run /tmp/run
      python benchmarks/training_loop.py assemble /tmp/run
      python benchmarks/training_loop.py tables [--check]
"""

import argparse
import functools
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
#: A results file as loaded: its runs (and machine, versions, commit) by key.
Results = Mapping[str, Any]
RESULTS = REPO / "docs" / "results" / "training_loop.json"

#: What every run's loop is (the file says it once).
LOOP = ("8 envs, MLP policy (2 x 256, Tanh) forward on every batch at torch's default "
        "threads, then the step with the workload's fixed actions; 3 s warm-up, 2 s timed; "
        "each launch a fresh process, backends interleaved")
#: The conditions of the table's columns: launch_spread's --policy and --load.
CONDITIONS = {"quiet": ("none", 0), "policy": ("mlp", 0), "busy": ("mlp", 1)}
WORKLOADS = ("CartPole-v1", "HalfCheetah-v5", "Pong")
#: The table's columns, in order: the runs of each workload in each condition.
TABLE_RUNS = tuple(f"{w}, {c}" for w in WORKLOADS for c in CONDITIONS)
#: The backends of the table, as the runs name them and as the rows do.
TABLE_BACKENDS = {"fast_vector": "`FastVectorEnv`", "fast_parallel": "`FastParallelEnvironment`",
                  "gym_sync": "`SyncVectorEnv`", "gym_async": "`AsyncVectorEnv`",
                  "sb3_subproc": "`SubprocVecEnv`", "envpool": "EnvPool",
                  "pufferlib_1w": "PufferLib (1 worker)"}
OURS = ("fast_vector", "fast_parallel")
#: The table's rows: each alf_env front end over each backend a user knows, then
#: the ALF front end over the gymnasium one.
TABLE_ROWS = tuple((ours, other) for ours in OURS for other in TABLE_BACKENDS
                   if other not in OURS) + (("fast_parallel", "fast_vector"),)
#: The README's headline runs: longer runs of the policy loop.
HEADLINES = {"HalfCheetah-v5": "HalfCheetah-v5, policy",
             "Pong": "Pong, policy",
             "HalfCheetah-v5, one busy process": "HalfCheetah-v5, policy, beside a busy process"}
HEADLINE_BACKENDS = ("fast_vector", "gym_sync", "fast_parallel")


def _table_run(workload: str, condition: str) -> List[str]:
    policy, load = CONDITIONS[condition]
    backends = [b for b in TABLE_BACKENDS] + ["bare_loop"]
    if (workload, condition) == ("CartPole-v1", "quiet"):
        backends.append("pufferlib")  # its default layout, once: the text quotes it
    return ["--workload", workload, "--launches", "5", "--policy", policy, "--load", str(load),
            "--backends", ",".join(backends)]


#: Each run of the results file: its key there, and launch_spread.py's arguments.
RUNS: Dict[str, List[str]] = {
    **{f"{w}, {c}": _table_run(w, c) for w in WORKLOADS for c in CONDITIONS},
    "HalfCheetah-v5": ["--workload", "HalfCheetah-v5", "--launches", "20",
                       "--backends", ",".join(HEADLINE_BACKENDS)],
    "Pong": ["--workload", "Pong", "--launches", "20", "--backends", ",".join(HEADLINE_BACKENDS)],
    "HalfCheetah-v5, one busy process": ["--workload", "HalfCheetah-v5", "--launches", "5",
                                         "--load", "1",
                                         "--backends", ",".join(HEADLINE_BACKENDS)],
    # Where alf_env does not win: one torch thread, and a busy process of another
    # session (--apart: the kernel then shares the CPUs between the sessions first).
    "HalfCheetah-v5, one torch thread": ["--workload", "HalfCheetah-v5", "--launches", "5",
                                         "--torch-threads", "1",
                                         "--backends", "fast_vector,gym_sync"],
    "HalfCheetah-v5, a busy process of another session": [
        "--workload", "HalfCheetah-v5", "--launches", "5", "--load", "1", "--apart",
        "--backends", "fast_vector,gym_sync"],
    "HalfCheetah-v5, a busy process of another session, one torch thread": [
        "--workload", "HalfCheetah-v5", "--launches", "5", "--load", "1", "--apart",
        "--torch-threads", "1", "--backends", "fast_vector,gym_sync"],
    "HalfCheetah-v5, per second": ["--workload", "HalfCheetah-v5", "--long", "60", "--runs", "5",
                                   "--backends", "fast_vector"],
    "HalfCheetah-v5, per second, FastVectorEnv and SyncVectorEnv interleaved": [
        "--workload", "HalfCheetah-v5", "--long", "60", "--runs", "2",
        "--backends", "fast_vector,gym_sync"],
}
#: The packages whose versions a run records.
PACKAGES = ("torch", "gymnasium", "mujoco", "envpool", "pufferlib-core", "stable-baselines3",
            "ale-py", "numpy")


def _file_name(run: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", run) + ".json"


def run_all(directory: Path, runs: Mapping[str, List[str]] = RUNS,
            script: Path = REPO / "benchmarks" / "launch_spread.py") -> None:
    """Runs each of ``runs`` missing from ``directory`` into ``directory/<run>.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    commit, recorded = commit_measured(), directory / "commit"
    if recorded.exists() and recorded.read_text().strip() != commit:
        raise RuntimeError(f"{directory} holds runs of {recorded.read_text().strip()}, "
                           f"this checkout is {commit}: use another directory")
    recorded.write_text(commit + "\n")
    for run, args in runs.items():
        out = directory / _file_name(run)
        if out.exists():
            print(f"# {run}: kept {out}", file=sys.stderr)
            continue
        print(f"# {run}: launch_spread.py {' '.join(args)}", file=sys.stderr, flush=True)
        partial = out.with_suffix(".partial")
        subprocess.run([sys.executable, str(script), *args, "--json", str(partial)],
                       check=True, cwd=REPO)
        partial.rename(out)


#: What a run measures: a change here since the commit makes the run "-dirty".
MEASURED = ("alf_env", "csrc", "setup.py", "CMakeLists.txt", "benchmarks/launch_spread.py")


def commit_measured() -> str:
    """The checkout's commit, "-dirty" if the measured code differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", *MEASURED)
    return git("rev-parse", "HEAD") + ("-dirty" if dirty else "")


def _machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model or platform.machine()}), {platform.system()} " \
           f"{platform.release()}"


def _versions() -> Dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def assemble(directory: Path, runs: Sequence[str] = tuple(RUNS)) -> Dict[str, object]:
    """The results file's content: this machine and its package versions, the commit
    the runs measured (recorded by :func:`run_all`) and each run of ``directory``;
    ``FileNotFoundError`` names what is missing."""
    commit = directory / "commit"
    if not commit.exists():
        raise FileNotFoundError(f"no {commit}: {directory} was not made by run")
    out: Dict[str, object] = {"machine": _machine(), "versions": _versions(),
                              "commit": commit.read_text().strip(), "loop": LOOP}
    for run in runs:
        path = directory / _file_name(run)
        if not path.exists():
            raise FileNotFoundError(f"run {run!r}: no {path} (python "
                                    f"benchmarks/training_loop.py run {directory})")
        out[run] = json.loads(path.read_text())
    return out


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> List[float]:
    """Launch *i* of one backend over launch *i* of the other."""
    return [a / b for a, b in zip(numerator, denominator)]


def paired_median(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """The median of :func:`paired_ratios`: the tables' ratio."""
    return statistics.median(paired_ratios(numerator, denominator))


def rate(value: float) -> str:
    """env-steps/s as the tables quote them: three significant digits in thousands
    ("214k", "49.2k", "5.61k"), whole under a thousand."""
    if value >= 100e3:
        return f"{value / 1e3:.0f}k"
    if value >= 10e3:
        return f"{value / 1e3:.1f}k"
    if value >= 1e3:
        return f"{value / 1e3:.2f}k"
    return f"{value:.0f}"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def ratio_table(results: Results) -> List[str]:
    """Each alf_env front end over each backend, paired medians per table run."""
    columns = [run.replace("-v1", "").replace("-v5", "") for run in TABLE_RUNS]
    lines = [_row(["ratio", *columns]), "|---|" + "---|" * len(columns)]
    for ours, other in TABLE_ROWS:
        cells = []
        for run in TABLE_RUNS:
            launches = results[run]["launches"]
            cells.append(f"{paired_median(launches[ours], launches[other]):.2f}x"
                         if ours in launches and other in launches else "not measured")
        lines.append(_row([f"{TABLE_BACKENDS[ours]} / {TABLE_BACKENDS[other]}", *cells]))
    return lines


def rates_table(results: Results) -> List[str]:
    """Each table run's median env-steps/s per backend."""
    lines = [_row(["run", *TABLE_BACKENDS.values()]), "|---|" + "---:|" * len(TABLE_BACKENDS)]
    for run in TABLE_RUNS:
        launches = results[run]["launches"]
        lines.append(_row([run, *(rate(statistics.median(launches[b])) if b in launches
                                  else "not measured" for b in TABLE_BACKENDS)]))
    return lines


def _spread(values: Sequence[float]) -> str:
    return f"{rate(statistics.median(values))} ({rate(min(values))}–{rate(max(values))})"


def headline_table(results: Results) -> List[str]:
    """The README's runs: rates (median, min–max) and the paired ratio to Sync."""
    lines = [_row(["run", "launches", "`FastVectorEnv`, env-steps/s",
                   "`FastParallelEnvironment`", "`SyncVectorEnv`",
                   "`FastVectorEnv` / `SyncVectorEnv`, paired"]),
             "|---|---:|---:|---:|---:|---:|"]
    for run, label in HEADLINES.items():
        launches = results[run]["launches"]
        fast, sync = launches["fast_vector"], launches["gym_sync"]
        ratios = paired_ratios(fast, sync)
        lines.append(_row([label, str(len(fast)), _spread(fast),
                           _spread(launches["fast_parallel"]), rate(statistics.median(sync)),
                           f"{statistics.median(ratios):.2f}x "
                           f"({min(ratios):.2f}–{max(ratios):.2f}x)"]))
    return lines


def headline(results: Results) -> List[str]:
    """The README's paragraph of headline ratios (FastVectorEnv over SyncVectorEnv)."""
    hc, pong, busy = (f"{_pair(results, run, 'fast_vector', 'gym_sync'):.2f}"
                      for run in HEADLINES)
    return [
        "On the project's 2-CPU machine (a Firecracker VM, torch 2.13 at its default threads), "
        "in a",
        "training loop with a torch MLP policy and 8 envs, `FastVectorEnv` ran at",
        f"**{hc}x** the speed of gymnasium's `SyncVectorEnv` on MuJoCo's HalfCheetah-v5,",
        f"**{pong}x** on Atari Pong, and **{busy}x** on HalfCheetah beside a busy",
        "process (medians of paired launches, in `docs/results/training_loop.json`).",
    ]


def _pair(results: Results, run: str, ours: str, other: str) -> float:
    launches = results[run]["launches"]
    return paired_median(launches[ours], launches[other])


def _span(values: Sequence[float]) -> str:
    """"1.18–1.92x" (one value: "1.18x")."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"{low}x" if low == high else f"{low}–{high}x"


def _paragraph(text: str, width: int = 78) -> List[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False)


def _bullets(items: Sequence[str]) -> List[str]:
    return [line for item in items for line in textwrap.wrap(
        item, 78, initial_indent="* ", subsequent_indent="  ", break_on_hyphens=False)]


def table_notes(results: Results) -> List[str]:
    """The bullets under the ratio table: what each backend's row says."""
    def runs(*workloads: str) -> List[str]:
        return [run for run in TABLE_RUNS if run.split(", ")[0] in workloads]

    def fast(other: str, *workloads: str) -> List[float]:
        return [_pair(results, run, "fast_vector", other) for run in runs(*workloads)]

    pipes = fast("gym_async", "CartPole-v1", "HalfCheetah-v5") + fast(
        "sb3_subproc", "CartPole-v1", "HalfCheetah-v5")
    pong_pipes = fast("gym_async", "Pong") + fast("sb3_subproc", "Pong")
    cp_quiet, cp_policy, cp_busy = fast("gym_sync", "CartPole-v1")
    heavy = fast("gym_sync", "HalfCheetah-v5", "Pong")
    puffer = results["CartPole-v1, quiet"]["launches"]
    puffer_policy = results["CartPole-v1, policy"]["launches"]["pufferlib_1w"]
    alf = [_pair(results, run, "fast_parallel", "fast_vector") for run in TABLE_RUNS]
    one_worker = _pair(results, "CartPole-v1, quiet", "fast_vector", "pufferlib_1w")
    return _bullets([
        "**`AsyncVectorEnv` and `SubprocVecEnv`** send each step's actions and results "
        f"through a pipe per worker: `FastVectorEnv` ran {_span(pipes)} them on CartPole and "
        f"HalfCheetah and {_span(pong_pipes)} on Pong, where the env's own step takes most "
        "of the time.",
        "**`SyncVectorEnv`** steps in the trainer's process. On CartPole's microsecond step "
        f"`FastVectorEnv` ran {cp_policy:.2f}x it with the policy, whose forward pass needs "
        f"the cores the workers use, {cp_quiet:.2f}x quiet and {cp_busy:.2f}x beside a busy "
        f"process; on HalfCheetah and Pong {_span(heavy)} in every condition.",
        "**EnvPool** steps its own C++ versions of these envs, with no Python, and runs "
        "only the envs it ships, not your Python env: its row shows where it leads (below "
        "1) and where the workers do.",
        f"**PufferLib** with one worker keeps up on the quiet steps (`FastVectorEnv` "
        f"{one_worker:.2f}x on CartPole) and falls far behind with torch in the loop: its "
        "waiting processes spin on the cores torch's threads need "
        f"({rate(statistics.median(puffer_policy))} env-steps/s on CartPole with the "
        "policy). With its default of one worker per CPU the quiet CartPole loop ran "
        f"{rate(statistics.median(puffer['pufferlib']))} env-steps/s.",
        "**`FastParallelEnvironment`** (the ALF API: `TimeStep`s of torch tensors) ran "
        f"{alf[0]:.2f}x `FastVectorEnv` on CartPole's quiet step and {_span(alf[1:])} in the "
        "other cells: its trainer makes a torch tensor of each leaf, and its workers run "
        "ALF's conversions in Python around each env step ({doc}`performance_analysis`).",
    ])


def headline_notes(results: Results) -> List[str]:
    """The paragraph under the headline runs: the ALF front end, the slowest launch."""
    hc, pong, busy = (_pair(results, run, "fast_parallel", "fast_vector") for run in HEADLINES)

    def slowest(run: str, backend: str) -> str:
        values = results[run]["launches"][backend]
        return f"{min(values) / statistics.median(values):.2f}"

    return _paragraph(
        f"Rates are medians (min–max) over the launches. In these runs "
        f"`FastParallelEnvironment` ran {hc:.2f}x `FastVectorEnv` on HalfCheetah, "
        f"{pong:.2f}x on Pong and {busy:.2f}x beside the busy process (paired medians). "
        f"Over 20 launches the slowest `FastVectorEnv` launch was "
        f"{slowest('HalfCheetah-v5', 'fast_vector')} of the median on HalfCheetah and "
        f"{slowest('Pong', 'fast_vector')} on Pong (`SyncVectorEnv`: "
        f"{slowest('HalfCheetah-v5', 'gym_sync')} and {slowest('Pong', 'gym_sync')}).")


def per_second(results: Results) -> List[str]:
    """The paragraph on the 60 s runs, second by second."""
    runs = results["HalfCheetah-v5, per second"]["long"]["fast_vector"]
    pair = results["HalfCheetah-v5, per second, FastVectorEnv and SyncVectorEnv "
                   "interleaved"]["long"]
    medians = [statistics.median(seconds) for seconds in runs]
    dips = [min(seconds) / median for seconds, median in zip(runs, medians)]

    def slowest(backend: str) -> str:
        return " and ".join(f"{min(s) / statistics.median(s):.2f}" for s in pair[backend])

    return _paragraph(
        f"Second by second, {len(runs)} runs of 60 s of the HalfCheetah loop with the policy "
        f"(no warm-up: the first seconds count) had medians of {rate(min(medians))} to "
        f"{rate(max(medians))} env-steps/s, and their slowest second was {min(dips):.2f} to "
        f"{max(dips):.2f} of the run's median. In 60 s runs interleaved with two more of "
        f"`FastVectorEnv` ({slowest('fast_vector')}), `SyncVectorEnv`, which steps in the "
        f"trainer's process with no worker and no setting, had slowest seconds of "
        f"{slowest('gym_sync')} of its median (`docs/results/training_loop.json`).")


def torch_thread_runs(results: Results) -> List[str]:
    """The paragraph on one torch thread, and the bullet on another session's process."""
    def run(name: str) -> Tuple[float, str, str]:
        launches = results[name]["launches"]
        return (paired_median(launches["fast_vector"], launches["gym_sync"]),
                rate(statistics.median(launches["fast_vector"])),
                rate(statistics.median(launches["gym_sync"])))

    one, one_fast, one_sync = run("HalfCheetah-v5, one torch thread")
    apart, apart_fast, apart_sync = run("HalfCheetah-v5, a busy process of another session")
    apart1, apart1_fast, apart1_sync = run(
        "HalfCheetah-v5, a busy process of another session, one torch thread")
    return _paragraph(
        f"With one torch thread instead of torch's default 2, the HalfCheetah policy loop "
        f"on `FastVectorEnv` ran {one:.2f}x `SyncVectorEnv` ({one_fast} against {one_sync} "
        f"env-steps/s; \"HalfCheetah-v5, one torch thread\"). Beside a busy process of "
        f"another session (below) it ran {apart:.2f}x at torch's 2 threads, where both "
        f"crawled ({apart_fast} and {apart_sync} env-steps/s), and {apart1:.2f}x at one torch "
        f"thread ({apart1_fast} and {apart1_sync}).")


def _policy_ratio(results: Results, run: str) -> str:
    return f"{_pair(results, run, 'fast_vector', 'gym_sync'):.2f}x"


def choosing_cartpole(results: Results) -> List[str]:
    """choosing.rst's decision row for steps under ~20 µs."""
    quiet, policy, busy = (_policy_ratio(results, f"CartPole-v1, {c}") for c in CONDITIONS)
    return _paragraph(f"CartPole with the policy in the loop: ``FastVectorEnv`` {policy} "
                      f"``SyncVectorEnv``; the step alone {quiet}; beside a busy process "
                      f"{busy}.", 70)


def choosing_halfcheetah(results: Results) -> List[str]:
    """choosing.rst's decision row for steps of ~30-300 µs."""
    fast = results["HalfCheetah-v5"]["launches"]["fast_vector"]
    return _paragraph(
        f"HalfCheetah with the policy in the loop: ``FastVectorEnv`` "
        f"{_policy_ratio(results, 'HalfCheetah-v5')} ``SyncVectorEnv`` "
        f"({rate(statistics.median(fast))} env-steps/s); beside a busy process "
        f"{_policy_ratio(results, 'HalfCheetah-v5, one busy process')}.", 70)


def choosing_pong(results: Results) -> List[str]:
    """choosing.rst's decision row for steps of ~300 µs to 1 ms and more."""
    quiet = _pair(results, "Pong, quiet", "fast_vector", "envpool")
    policy = _pair(results, "Pong, policy", "fast_vector", "envpool")
    return _paragraph(
        f"Pong with the policy in the loop: ``FastVectorEnv`` "
        f"{_policy_ratio(results, 'Pong')} ``SyncVectorEnv``. EnvPool steps its own C++ "
        f"version of the env and skips Python: the step alone ran {quiet:.2f}x it on Pong, "
        f"and {policy:.2f}x with the policy (:doc:`benchmarks`).", 70)


def choosing_losses(results: Results) -> List[str]:
    """choosing.rst's bullets on where alf_env does not win, with their figures."""
    apart = "HalfCheetah-v5, a busy process of another session"
    return _bullets([
        "**Cheap envs with a policy on few cores.** When the step costs about as much as "
        "handing work to another process, stepping in the trainer's process is hard to "
        "beat: with the policy in the loop, CartPole ran faster in ``SyncVectorEnv`` on 2 "
        f"vCPUs (``FastVectorEnv`` {_policy_ratio(results, 'CartPole-v1, policy')}).",
        "**A busy process of another session.** When another terminal's job keeps a core "
        "busy, the kernel gives the trainer's whole session about one core: "
        f"``FastVectorEnv`` ran {_policy_ratio(results, apart)} ``SyncVectorEnv`` at "
        f"torch's 2 threads, {_policy_ratio(results, apart + ', one torch thread')} at one "
        "thread, and both far faster at one thread. The env logs a WARNING naming "
        "``torch.set_num_threads(n)`` when it sees this.",
    ])


def choosing_pufferlib(results: Results) -> List[str]:
    """choosing.rst's paragraph on PufferLib."""
    default = results["CartPole-v1, quiet"]["launches"]["pufferlib"]
    one = _pair(results, "CartPole-v1, quiet", "fast_vector", "pufferlib_1w")
    return _paragraph(
        "**PufferLib.** ``pufferlib.vector.Multiprocessing`` (pufferlib-core 3.0.23) spins "
        "in its workers and its main process without yielding, so with one worker per CPU "
        "there are more spinners than cores on a small machine. With that default the quiet "
        f"CartPole loop ran {rate(statistics.median(default))} env-steps/s here; with one "
        f"worker it keeps up on steps alone (``FastVectorEnv`` {one:.2f}x on CartPole), and "
        "with a policy in the loop it spins on the cores torch's threads need "
        "(:doc:`benchmarks`).")


def training_figures(results: Results) -> List[str]:
    """training.rst's pointer to the benchmarks' policy-loop figures."""
    return _paragraph(
        f"In a training loop of 8 envs with a policy, ``FastVectorEnv`` ran "
        f"{_policy_ratio(results, 'HalfCheetah-v5')} ``SyncVectorEnv`` on HalfCheetah and "
        f"{_policy_ratio(results, 'Pong')} on Pong (:doc:`benchmarks`).", 74)


#: Renders a block's lines from the results file.
Render = Callable[[Results], List[str]]
#: Each generated block: the page it is on, and what renders it.
BLOCKS: Dict[str, Tuple[str, Render]] = {
    "ratios": ("docs/benchmarks.md", ratio_table),
    "rates": ("docs/benchmarks.md", rates_table),
    "headline runs": ("docs/benchmarks.md", headline_table),
    "table notes": ("docs/benchmarks.md", table_notes),
    "headline notes": ("docs/benchmarks.md", headline_notes),
    "per second": ("docs/benchmarks.md", per_second),
    "torch threads": ("docs/benchmarks.md", torch_thread_runs),
    "headline": ("README.md", headline),
    "cartpole": ("docs/choosing.rst", choosing_cartpole),
    "halfcheetah": ("docs/choosing.rst", choosing_halfcheetah),
    "pong": ("docs/choosing.rst", choosing_pong),
    "losses": ("docs/choosing.rst", choosing_losses),
    "pufferlib": ("docs/choosing.rst", choosing_pufferlib),
    "policy loop": ("docs/training.rst", training_figures),
}


def markers(page: str, name: str) -> Tuple[str, str]:
    """A block's begin and end lines on ``page``: HTML comments in Markdown, comments
    in reStructuredText (set off by blank lines, as its explicit markup needs)."""
    if page.endswith(".rst"):
        return f".. training_loop: {name}", f".. /training_loop: {name}"
    return f"<!-- training_loop: {name} -->", f"<!-- /training_loop: {name} -->"


def block_pattern(page: str, name: str) -> "re.Pattern[str]":
    """Matches block ``name`` on ``page``, markers included; its markers' indentation
    is the group ``indent``."""
    begin, end = markers(page, name)
    return re.compile(rf"^(?P<indent>[ ]*){re.escape(begin)}\n.*?"
                      rf"^(?P=indent){re.escape(end)}$", re.S | re.M)


def render_page(text: str, results: Results,
                blocks: Mapping[str, Tuple[str, Render]] = BLOCKS,
                page: Optional[str] = None) -> str:
    """``text`` with each block of ``page`` (every block when None) rendered from
    ``results``, at its markers' indentation (a block may sit in a list item or a
    table cell); ``ValueError`` if a block's markers are missing."""
    for name, (block_page, render) in blocks.items():
        if page is not None and block_page != page:
            continue
        begin, end = markers(block_page, name)
        pattern = block_pattern(block_page, name)
        gap = [""] if block_page.endswith(".rst") else []
        lines = [begin, *gap, *render(results), *gap, end]
        # A function, not the string: a block's text may hold backslashes.
        text, count = pattern.subn(functools.partial(_block, lines), text)
        if count != 1:
            raise ValueError(f"{block_page}: expected one block {begin!r} ... {end!r}, "
                             f"found {count}")
    return text


def _block(lines: List[str], match: "re.Match[str]") -> str:
    indent = match.group("indent")
    return "\n".join(indent + line if line else line for line in lines)


def stale_pages(results: Results, write: bool,
                read: Callable[[str], str] = lambda page: (REPO / page).read_text()) -> List[str]:
    """The pages whose generated blocks differ from ``results`` (rewritten if ``write``)."""
    stale = []
    for page in sorted({page for page, _ in BLOCKS.values()}):
        text = read(page)
        rendered = render_page(text, results, page=page)
        if rendered != text:
            stale.append(page)
            if write:
                (REPO / page).write_text(rendered)
    return stale


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run every missing run into DIR")
    run.add_argument("directory", type=Path)
    gather = commands.add_parser("assemble", help="write the results file from DIR's runs")
    gather.add_argument("directory", type=Path)
    gather.add_argument("--json", type=Path, default=RESULTS)
    tables = commands.add_parser("tables", help="rewrite the docs' generated tables")
    tables.add_argument("--json", type=Path, default=RESULTS)
    tables.add_argument("--check", action="store_true",
                        help="only list the stale pages (exit status 1 if any)")
    args = parser.parse_args(argv)
    if args.command == "run":
        run_all(args.directory)
    elif args.command == "assemble":
        args.json.write_text(json.dumps(assemble(args.directory), indent=1) + "\n")
        print(f"wrote {args.json}")
    else:
        stale = stale_pages(json.loads(args.json.read_text()), write=not args.check)
        for page in stale:
            print(f"{page}: {'stale' if args.check else 'rewritten'}")
        return 1 if stale and args.check else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
