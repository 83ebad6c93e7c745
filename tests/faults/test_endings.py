"""Every way a training script ends, for every front end and start method (issue 11).

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
and ``forkserver`` run a smaller set with 2 envs. The selected cells run
``CONCURRENCY`` at a time, once for the whole module.
"""

import concurrent.futures
from typing import Dict

import pytest

from tests.faults.core import SLACK
from tests.faults.endings import (ENDINGS, EXIT_BOUND, FRONT_ENDS, Cell, Outcome, problems,
                                  run_cell)

CONCURRENCY = 4      # child scripts run at the same time

FORK_CELLS = [Cell(fe, "fork", 10, ending) for fe in FRONT_ENDS for ending in ENDINGS]
SMALL_ENDINGS = ("end", "sigint_group_step", "sigint_group_start", "sigterm", "sigkill")
SMALL_CELLS = [Cell(fe, method, 2, ending) for method in ("spawn", "forkserver")
               for fe in FRONT_ENDS for ending in SMALL_ENDINGS]
CELLS = FORK_CELLS + SMALL_CELLS


@pytest.fixture(scope="module")
def outcomes(request) -> Dict[Cell, Outcome]:
    """Runs every selected cell of this module, ``CONCURRENCY`` at a time."""
    cells = [item.callspec.params["cell"] for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec")
             and "cell" in item.callspec.params]
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        return dict(zip(cells, pool.map(run_cell, cells)))


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_ending_is_quick_quiet_and_leaves_nothing(cell: Cell, outcomes):
    outcome = outcomes[cell]
    report = f"stdout: {outcome.stdout}\nstderr:\n{outcome.stderr}"
    assert problems(cell, outcome) == [], report
    # Generous slack on a busy machine: the bound is the contract, and the
    # interpreter's own teardown (torch loaded) takes up to ~1 s here.
    assert outcome.exit_time < EXIT_BOUND + SLACK, f"{outcome.exit_time:.2f} s\n{report}"
