"""Every way a training script ends, for every front end and start method.

Each cell of the table runs ``tests/faults/ending_script.py`` (a stepping loop
with no ``with`` and no ``close()``) as a real child in its own session (see
``tests/faults/endings.py``) and asserts what its user sees:

* it exits within ``EXIT_BOUND`` s of the ending (from the moment the script
  ends by itself, or the signal is sent), whatever the number of envs;
* it prints nothing but what the script itself raised (one traceback for an
  exception or a Ctrl-C, none otherwise) and exits with the usual status;
* it leaves nothing: no child (running or zombie) when its last exit hook
  runs, no process of its session once it is gone, no new ``/dev/shm`` entry.

Every ending runs for every front end with 10 envs under ``fork``; ``spawn``
and ``forkserver`` run a smaller set with 2 envs. The cells run
``CONCURRENCY`` at a time (``tests.support.child_runs.RunTable``).
"""

import pytest

from tests.faults.endings import ENDINGS, EXIT_BOUND, FRONT_ENDS, Cell, problems, run_cell
from tests.support.child_runs import RunTable, selected_params

CONCURRENCY = 4      # child scripts run at the same time
# The bound is the contract (measured one script at a time by
# benchmarks/exit_times.py); here several scripts with 10 workers each exit at
# once on a shared 2-core machine, and the interpreter's own teardown (torch
# loaded) takes up to ~1 s of that. Still far below what a close per worker
# after another costs (5 s each before).
EXIT_SLACK = 3.0

# Every ending, every front end, 10 envs (one worker process each) under fork.
FORK_CELLS = [Cell(fe, "fork", 10, ending) for fe in FRONT_ENDS for ending in ENDINGS]
# spawn and forkserver, 2 envs: the endings whose paths depend on the start
# method (workers in a fresh interpreter end without its teardown, inherit
# SIGINT ignored, can get a Ctrl-C while they import; under forkserver the
# trainer is not their OS parent), for the pipe front end and the ALF and
# gymnasium shared-memory front ends.
SMALL_CELLS = [Cell(fe, method, 2, ending) for method in ("spawn", "forkserver")
               for fe in ("process", "fast", "vector")
               for ending in ("end", "sigint_group_step", "sigint_group_start")]
SMALL_CELLS += [Cell("process", method, 2, "sigkill") for method in ("spawn", "forkserver")]
CELLS = FORK_CELLS + SMALL_CELLS


@pytest.fixture(scope="module")
def table(request) -> RunTable:
    """The selected cells of this module, run ``CONCURRENCY`` at a time as the tests ask."""
    return RunTable(selected_params(request, "cell"), run_cell, CONCURRENCY)


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_ending_is_quick_quiet_and_leaves_nothing(cell: Cell, table):
    outcome = table.outcome(cell)
    report = f"stdout: {outcome.stdout}\nstderr:\n{outcome.stderr}"
    assert problems(cell, outcome) == [], report
    assert outcome.exit_time < EXIT_BOUND + EXIT_SLACK, f"{outcome.exit_time:.2f} s\n{report}"
