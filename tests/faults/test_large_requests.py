"""Requests and answers far larger than a pipe's buffer, through every front end.

A worker in a job loop reads its pipe only when told to (the doorbell), so
a request written before the worker reads could fill the pipe and wait for
ever; likewise a request written while the worker is still writing an answer
nobody reads. Each front end runs ``tests/faults/large_request_script.py`` as
a child (the script a user writes: ``set_attr``, ``env_method``/``call``,
reset options, requests sent before earlier answers are read), which checks
that every env received the payload intact; here we check that it finished,
quietly, and left nothing behind.
"""

import concurrent.futures
from typing import Dict

import pytest

from tests.support.child_runs import ChildRun, run_module

CHILD_TIMEOUT = 120.0  # a child still running then hangs: killed, and the test fails

# 100 MB costs seconds per front end on a loaded machine: two front ends take
# it (one job loop, one plain pipe), the others stop at 10 MB.
SIZES_MB = {"process": ["1", "10", "100"], "parallel": ["1", "10"], "fast": ["1", "10"],
            "vector": ["1", "10", "100"], "sb3": ["1", "10"]}

# The checks each script makes, per size.
WAYS = {"process": ["call", "pipelined call", "pipelined answer"],
        "parallel": ["call", "pipelined call", "pipelined answer"],
        "fast": ["call", "pipelined call", "pipelined answer"],
        "vector": ["set_attr", "call", "reset options", "get_attr answer"],
        "sb3": ["set_attr", "env_method", "get_attr answer"]}


@pytest.fixture(scope="module")
def runs() -> Dict[str, ChildRun]:
    """Every front end's script, run side by side (mostly waiting on pipes and imports)."""
    with concurrent.futures.ThreadPoolExecutor(len(SIZES_MB)) as pool:
        futures = {fe: pool.submit(run_module, "tests.faults.large_request_script",
                                   [fe, *sizes], CHILD_TIMEOUT)
                   for fe, sizes in SIZES_MB.items()}
        return {fe: future.result() for fe, future in futures.items()}


@pytest.mark.parametrize("front_end", sorted(SIZES_MB))
def test_requests_larger_than_the_pipe_buffer_go_through_intact(front_end, runs):
    sizes = SIZES_MB[front_end]
    run = runs[front_end]
    assert not run.problems(), f"{run.problems()}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.status == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    checked = [line for line in run.stdout.splitlines() if line.startswith("ok ")]
    assert checked == [f"ok {way} {float(mb)}" for mb in sizes for way in WAYS[front_end]]
    assert run.stdout.splitlines()[-1] == "done"
    assert "Traceback" not in run.stderr, run.stderr
