"""Envs dropped without ``close()`` end their workers when they are garbage collected.

Each front end runs ``tests/faults/collected_script.py`` as a child: an env
whose envs take 30 s to close is dropped (``del env``, reference counting
alone), then 100 small envs are made in a loop and never closed, then the
script ends with the last one still referenced. A program that makes
evaluation envs in a loop must not pile up worker processes, and collecting
an env must neither wait for its envs' ``close()`` nor need a cycle collection.
The scripts run ``CONCURRENCY`` at a time (``tests.support.child_runs.RunTable``).
"""

import json
import subprocess
import sys
from typing import NamedTuple, Optional

import pytest

from tests.faults.collected_script import FRONT_ENDS, LOOP, SLOW_CLOSE
from tests.support.child_runs import RunTable, selected_params
from tests.support.faults import gone, kill_leftovers, wait_all_gone
from tests.support.paths import REPO_ROOT

# The workers must be gone within 1 s of the collection (measured: ~20 ms);
# the bound is generous for a busy shared machine, the value is in the message.
GONE_BOUND = 5.0
CHILD_TIMEOUT = 300.0
CONCURRENCY = 3  # child scripts run at the same time (each mostly waits for its workers)


class Run(NamedTuple):
    status: Optional[int]  # None: it hung and was killed
    stdout: str
    stderr: str


def run_script(front_end: str) -> Run:
    proc = subprocess.Popen([sys.executable, "-m", "tests.faults.collected_script", front_end],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        return Run(None, stdout, stderr)
    return Run(proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def table(request) -> RunTable:
    """The scripts of the selected front ends, ``CONCURRENCY`` at a time."""
    return RunTable(selected_params(request, "front_end"), run_script, CONCURRENCY)


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_envs_dropped_unclosed_end_their_workers_when_collected(front_end, table):
    run = table.outcome(front_end)
    report = None
    try:
        assert run.status == 0, run.stderr
        report = json.loads(run.stdout.splitlines()[-1])
        # The script prints nothing else: no "Exception ignored in" from a finalizer.
        assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, (
            run.stderr)
        assert report["collected"], "the dropped env was not freed by `del`: a cycle keeps it"
        assert report["del_seconds"] < min(GONE_BOUND, SLOW_CLOSE), report
        assert report["gone_after"] is not None and report["gone_after"] < GONE_BOUND, (
            f"the dropped env's workers {report['dropped_pids']} were gone after "
            f"{report['gone_after']} s (expected within 1 s)")
        assert len(report["loop_pids"]) == LOOP, report["loop_pids"]
        assert report["alive_after_loop"] == report["last_pids"], report
        assert len(report["last_pids"]) == 1
        print(f"{front_end}: dropped env's workers gone {1000 * report['gone_after']:.0f} ms "
              f"after `del` (the del: {1000 * report['del_seconds']:.0f} ms)")
    finally:
        pids = [] if report is None else report["dropped_pids"] + report["loop_pids"]
        # The last env's worker is closed by the exit hook of the script.
        all_gone = wait_all_gone(pids, timeout=GONE_BOUND)
        if not all_gone:
            kill_leftovers([pid for pid in pids if not gone(pid)])
    assert all_gone, "workers outlived the script"
