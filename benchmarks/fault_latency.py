"""How long does each front end take to report an injected fault (docs/reliability.md's times)?

For each front end (ProcessEnvironment, ParallelAlfEnvironment,
FastParallelEnvironment, FastVectorEnv; 3 envs, env 1 fails) it measures, over
``--repeats`` runs, the median and the worst of:

* ``exception in step``: from the call to the re-raised exception;
* ``death in step`` (SIGKILL, SIGSEGV, ``os._exit``): from the death (the env
  stamps ``time.monotonic()`` just before it dies) to ``WorkerDiedError``;
* ``death in start``: the same while the constructor runs;
* ``SIGKILL from outside``: from ``os.kill`` on a worker busy in a step;
* ``hung step``: the wait with ``timeout=0.5`` (or the constructor's
  ``timeout`` for the batched ALF envs) until ``EnvTimeoutError``;
* ``close after hang``: ``close()`` with the default ``CLOSE_*`` constants.

It uses the fault-injecting envs and adapters of ``tests/support/faults.py``.

Run (from the repository root):  python benchmarks/fault_latency.py [--repeats 5]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.errors import EnvTimeoutError, WorkerDiedError
from tests.support.faults import (
    WAIT_TIMEOUT,
    AlfBatchedFrontEnd,
    Fault,
    FrontEnd,
    ProcessFrontEnd,
    VectorFrontEnd,
    died_at,
    kill_later,
)

FRONT_ENDS = [ProcessFrontEnd(), AlfBatchedFrontEnd(ParallelAlfEnvironment, "parallel"),
              AlfBatchedFrontEnd(FastParallelEnvironment, "fast"), VectorFrontEnd()]


def _expect(error: type, fn: Callable[[], object]) -> float:
    """Runs ``fn``, which must raise ``error``; returns when it raised."""
    try:
        fn()
    except error:
        return time.monotonic()
    raise AssertionError(f"expected {error.__name__}")


def exception_in_step(fe: FrontEnd) -> float:
    env = fe.make(Fault("raise", "step"))
    try:
        fe.reset(env)
        begin = time.monotonic()
        return _expect(ValueError, lambda: fe.step(env)) - begin
    finally:
        fe.close(env)


def death(fe: FrontEnd, kind: str, phase: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        stamp = Path(tmp) / "died"
        fault = Fault(kind, phase, stamp=str(stamp))
        if phase == "ctor":
            return _expect(WorkerDiedError, lambda: fe.make(fault)) - died_at(stamp)
        env = fe.make(fault)
        try:
            fe.reset(env)
            return _expect(WorkerDiedError, lambda: fe.step(env)) - died_at(stamp)
        finally:
            fe.close(env)


def external_kill(fe: FrontEnd) -> float:
    env = fe.make(Fault("hang", "step"))
    try:
        fe.reset(env)
        killer, killed_at = kill_later(fe, env, 0.2)
        raised = _expect(WorkerDiedError, lambda: fe.step(env))
        killer.join()
        return raised - killed_at[0]
    finally:
        fe.close(env)


def hang(fe: FrontEnd, closing: Dict[str, List[float]]) -> float:
    env = fe.make_with_timeout(Fault("hang", "step"), WAIT_TIMEOUT)
    try:
        fe.reset(env)
        begin = time.monotonic()
        return _expect(EnvTimeoutError, lambda: fe.step(env, timeout=WAIT_TIMEOUT)) - begin
    finally:
        begin = time.monotonic()
        fe.close(env)
        closing[fe.name].append(time.monotonic() - begin)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    closing: Dict[str, List[float]] = {fe.name: [] for fe in FRONT_ENDS}
    measures = [
        ("exception in step", exception_in_step),
        ("SIGKILL in step", lambda fe: death(fe, "sigkill", "step")),
        ("SIGSEGV in step", lambda fe: death(fe, "segv", "step")),
        ("os._exit(3) in step", lambda fe: death(fe, "exit", "step")),
        ("SIGKILL in start", lambda fe: death(fe, "sigkill", "ctor")),
        ("SIGKILL from outside", external_kill),
        (f"hung step (timeout {WAIT_TIMEOUT} s)", lambda fe: hang(fe, closing)),
    ]
    rows = []
    for label, measure in measures:
        cells = []
        for fe in FRONT_ENDS:
            times = [measure(fe) for _ in range(args.repeats)]
            cells.append(f"{statistics.median(times) * 1e3:.0f} ({max(times) * 1e3:.0f})")
        rows.append((label, cells))
    rows.append(("close after hang", [
        f"{statistics.median(closing[fe.name]) * 1e3:.0f} ({max(closing[fe.name]) * 1e3:.0f})"
        for fe in FRONT_ENDS]))
    print(f"Time to error in ms: median (worst) of {args.repeats} runs\n")
    print("| fault | " + " | ".join(fe.name for fe in FRONT_ENDS) + " |")
    print("|---|" + "---|" * len(FRONT_ENDS))
    for label, cells in rows:
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
