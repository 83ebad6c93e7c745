"""The full training-loop run behind ``docs/results/training_loop.json``, and the
tables the docs print from it.

``docs/benchmarks.md``'s tables and the README's headline are generated here,
between ``<!-- training_loop: NAME -->`` and ``<!-- /training_loop: NAME -->``
lines, from the results file alone, so a new run changes them by one command;
the figures quoted in prose are checked against the same file by
``tests/test_doc_figures.py``.

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
    hc, pong, busy = (f"{paired_median(launches['fast_vector'], launches['gym_sync']):.2f}"
                      for launches in (results[run]["launches"] for run in HEADLINES))
    return [
        "On the project's 2-CPU machine (a Firecracker VM, torch 2.13 at its default threads), "
        "in a",
        "training loop with a torch MLP policy and 8 envs, `FastVectorEnv` ran at",
        f"**{hc}x** the speed of gymnasium's `SyncVectorEnv` on MuJoCo's HalfCheetah-v5,",
        f"**{pong}x** on Atari Pong, and **{busy}x** on HalfCheetah beside a busy",
        "process (medians of paired launches, in `docs/results/training_loop.json`).",
    ]


#: Renders a block's lines from the results file.
Render = Callable[[Results], List[str]]
#: Each generated block: the page it is on, and what renders it.
BLOCKS: Dict[str, Tuple[str, Render]] = {
    "ratios": ("docs/benchmarks.md", ratio_table),
    "rates": ("docs/benchmarks.md", rates_table),
    "headline runs": ("docs/benchmarks.md", headline_table),
    "headline": ("README.md", headline),
}


def render_page(text: str, results: Results,
                blocks: Mapping[str, Tuple[str, Render]] = BLOCKS,
                page: Optional[str] = None) -> str:
    """``text`` with each block of ``page`` (every block when None) rendered from
    ``results``; ``ValueError`` if a block's markers are missing."""
    for name, (block_page, render) in blocks.items():
        if page is not None and block_page != page:
            continue
        begin, end = f"<!-- training_loop: {name} -->", f"<!-- /training_loop: {name} -->"
        pattern = re.compile(rf"^{re.escape(begin)}\n.*?^{re.escape(end)}$", re.S | re.M)
        body = "\n".join([begin, *render(results), end])
        # A function, not the string: a block's text may hold backslashes.
        text, count = pattern.subn(functools.partial(_block, body), text)
        if count != 1:
            raise ValueError(f"{block_page}: expected one block {begin!r} ... {end!r}, "
                             f"found {count}")
    return text


def _block(body: str, _: "re.Match[str]") -> str:
    return body


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
