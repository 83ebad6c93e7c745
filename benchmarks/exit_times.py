"""How long does a training script take to exit, for each way it ends and each front end?

It gives the exit times of docs/reliability.md ("How a training script ends").
Runs ``tests/faults/ending_script.py`` (a stepping loop with no ``with`` and no
``close()``) once per (ending, front end) and repeat, one script at a time, and
prints a Markdown table: the median (max) seconds from the ending (the script
ends by itself, or the signal is sent) to the exit (for SIGKILL: until every
worker is gone), and the number of tracebacks on stderr. A cell whose script
printed anything else, exited with an unexpected status or left a process
behind is marked ``!`` (details after the table). The first row is the
interpreter alone: the same imports, no env, the same measurement.

    python benchmarks/exit_times.py                       # fork, 10 envs, 3 repeats
    python benchmarks/exit_times.py --start-method spawn --num-envs 4 --repeats 1
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.endings import ENDINGS, FRONT_ENDS, Cell, Outcome, problems, run_cell

REPO_ROOT = Path(__file__).resolve().parents[1]


def interpreter_exit_time(front_end: str) -> float:
    """Seconds from the end of a script that imports what ``front_end`` needs
    (and starts no env) to its exit."""
    code = (f"import time; from tests.faults.ending_script import _import; "
            f"_import({front_end!r}); print(time.monotonic(), flush=True)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, text=True)
    ended_at = float(proc.stdout.readline())
    proc.wait()
    exited_at = time.monotonic()
    proc.stdout.close()
    return exited_at - ended_at


def fmt(times: List[float]) -> str:
    return f"{statistics.median(times):.2f} ({max(times):.2f})"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start-method", default="fork",
                        choices=["fork", "spawn", "forkserver"])
    parser.add_argument("--num-envs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--endings", nargs="*", default=list(ENDINGS), choices=list(ENDINGS))
    parser.add_argument("--front-ends", nargs="*", default=list(FRONT_ENDS),
                        choices=list(FRONT_ENDS))
    args = parser.parse_args(argv)

    results: Dict[Tuple[str, str], List[Outcome]] = {}
    notes: List[str] = []
    baseline = {fe: [interpreter_exit_time(fe) for _ in range(args.repeats)]
                for fe in args.front_ends}
    for ending in args.endings:
        for fe in args.front_ends:
            cell = Cell(fe, args.start_method, args.num_envs, ending)
            results[(ending, fe)] = [run_cell(cell) for _ in range(args.repeats)]
            for outcome in results[(ending, fe)]:
                notes.extend(f"{cell.id}: {p}" for p in problems(cell, outcome))
            print(f"  {cell.id}: {fmt([o.exit_time for o in results[(ending, fe)]])} s",
                  file=sys.stderr, flush=True)

    print(f"Exit time in seconds, median (max) of {args.repeats}, and tracebacks on "
          f"stderr; start method {args.start_method}, {args.num_envs} envs.\n")
    print("| ending | " + " | ".join(args.front_ends) + " |")
    print("|---|" + "---|" * len(args.front_ends))
    print("| (interpreter alone: imports, no env) | "
          + " | ".join(f"{fmt(baseline[fe])}" for fe in args.front_ends) + " |")
    for ending in args.endings:
        cells = []
        for fe in args.front_ends:
            outcomes = results[(ending, fe)]
            tracebacks = sorted({o.stderr.count("Traceback") for o in outcomes})
            bad = any(problems(Cell(fe, args.start_method, args.num_envs, ending), o)
                      for o in outcomes)
            cells.append(f"{fmt([o.exit_time for o in outcomes])}, "
                         f"{'/'.join(map(str, tracebacks))} tb{' !' if bad else ''}")
        print(f"| {ending} | " + " | ".join(cells) + " |")
    if notes:
        print("\nProblems:")
        for note in notes:
            print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
