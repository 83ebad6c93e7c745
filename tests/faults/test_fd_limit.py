"""File descriptors: a low ``ulimit -n``, and what a closed front end keeps.

Under a limit too low for the workers, the constructor raises one
``FdLimitError`` naming ``RLIMIT_NOFILE`` and how many descriptors the workers
need (not an empty ``EOFError`` with a thread's traceback on stderr), and
leaves no worker behind; a limit that fits still works. Each case runs
``tests/faults/fd_limit_script.py`` as a child.
"""

import functools
import gc
import os
import re

import pytest

from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.vector import FastVectorEnv
from tests.support.alf_envs import CountingEnv
from tests.support.child_runs import ChildRun, run_module
from tests.support.gym_envs import info_env

CHILD_TIMEOUT = 120.0
REFUSAL_BOUND = 30.0  # from the script's start to its exit (imports included), generous
FRONT_ENDS = ("vector", "fast")


def run_script(front_end: str, limit: int, num_workers: int, *extra: str) -> ChildRun:
    return run_module("tests.faults.fd_limit_script",
                      [front_end, str(limit), str(num_workers), *extra], CHILD_TIMEOUT)


def assert_refused(run: ChildRun, explanation: str) -> None:
    """The script ended with one FdLimitError (its only traceback) and left nothing."""
    report = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert not run.problems(), f"{run.problems()}\n{report}"
    assert run.status == 1, report
    assert run.seconds < REFUSAL_BOUND, report
    assert "stepped" not in run.stdout, report
    assert run.stderr.count("Traceback") == 1, report
    last = run.stderr.strip().splitlines()[-1]
    assert re.match(r"alf_env\.errors\.FdLimitError: \[Errno 24\] 16 worker processes need "
                    r"about \d+ open file descriptors in this process \(" + explanation
                    + r"\), but its limit on open files \(RLIMIT_NOFILE\) is \d+: raise it",
                    last), report


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_too_many_workers_for_the_fd_limit_are_refused_up_front(front_end):
    run = run_script(front_end, 64, 16)
    assert_refused(run, r"\d+ open now \+ 4 per worker \+ \d+ while they start")
    assert "is 64: raise it" in run.stderr


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_running_out_of_fds_while_starting_gives_the_same_error(front_end):
    # The up-front count turned off: the workers run out of descriptors midway.
    run = run_script(front_end, 40, 16, "unchecked")
    assert_refused(run, "ran out of them while starting")


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_workers_that_fit_the_fd_limit_start_and_step(front_end):
    run = run_script(front_end, 64, 4)
    assert not run.problems(), run.problems()
    assert run.status == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.stdout.splitlines()[-1] == "stepped"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("cls", [FastParallelEnvironment, FastVectorEnv])
def test_close_releases_the_fds_of_every_worker(cls):
    def make(n):
        if cls is FastVectorEnv:
            return FastVectorEnv([info_env] * n, num_workers=n)
        return FastParallelEnvironment([functools.partial(CountingEnv, env_id=i)
                                        for i in range(n)], num_workers=n)
    make(1).close()  # what a process keeps once it has had workers (multiprocessing's)
    # Earlier tests' garbage may hold descriptors that a collection during make(8)
    # would close, hiding the workers' from the count: collect it first.
    gc.collect()
    before = open_fds()
    env = make(8)
    try:
        env.reset()
        assert open_fds() >= before + 8 * 3  # a pipe and two Popen pipes per worker, at least
    finally:
        env.close()  # a failed count must not leave 8 workers to the next tests
    assert open_fds() <= before + (1 if cls is FastVectorEnv else 0)  # + its views' region
