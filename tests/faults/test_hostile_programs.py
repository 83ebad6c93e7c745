"""Programs that do what a training script should not, run as child scripts.

Each test runs ``tests/faults/hostile_script.py`` (see its docstring) in its own
session and checks what its user would see: the exit status, the time it took
(a generous bound), stderr, and that nothing is left behind (no process of
its session, no new ``/dev/shm`` entry). The scenarios: a forked child that
ends, copies of the env, two threads on one env, ``sys.exit()`` or
``KeyboardInterrupt`` inside an env, and a stopped worker of a SIGKILLed
trainer. Every front end runs each of them.

The scenarios after which the script goes on (every forked child, copies, two
threads) run one after another in one child per front end (``hostile_script
all``), each test reading its scenario's part of stdout and stderr and its
duration; the child scripts run ``CONCURRENCY`` at a time
(``tests.support.child_runs.RunTable``).
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, List, NamedTuple, Tuple

import pytest

from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.errors import (
    ConcurrentUseError,
    EnvironmentClosedAttributeError,
    EnvironmentClosedError,
)
from tests.faults.hostile_script import FRONT_ENDS, in_one_run
from tests.support.child_runs import (
    ChildRun,
    RunTable,
    lasting_new_shm_entries,
    run_module,
    selected_params,
    session_processes,
)
from tests.support.faults import REPO_ROOT, kill_leftovers, wait_all_gone
from tests.support.probe_envs import ProbeEnv
from tests.support.shm_leaks import shm_entries

CHILD_TIMEOUT = 120.0  # a script still running then hangs: killed, and the test fails
ALL_TIMEOUT = 300.0    # the same for a script of every scenario of a front end
RUN_BOUND = 60.0       # per scenario, generous: a few seconds each on a quiet machine
GONE_BOUND = 10.0      # the workers of a SIGKILLed trainer, one of them stopped
CONCURRENCY = 3        # child scripts run at the same time

CLASS_NAMES = {"process": "ProcessEnvironment", "parallel": "ParallelAlfEnvironment",
               "fast": "FastParallelEnvironment", "vector": "FastVectorEnv",
               "vector_pipe": "FastVectorEnv", "sb3": "FastSubprocVecEnv"}


def run_script(args: Tuple[str, ...]) -> ChildRun:
    """Runs ``hostile_script`` with ``args`` to its end (see ``child_runs.run_module``)."""
    return run_module("tests.faults.hostile_script", args,
                      ALL_TIMEOUT if args[0] == "all" else CHILD_TIMEOUT)


class Part(NamedTuple):
    """One scenario of a ``hostile_script all`` run: its stdout, stderr and duration."""
    stdout: str
    stderr: str
    seconds: float


def part(run: ChildRun, name: str) -> Part:
    """Scenario ``name`` of the ``all`` run ``run`` (the whole run must be clean: no
    leftovers, exit status 0, every scenario run)."""
    report = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert not run.problems(), f"{run.problems()}\n{report}"
    assert run.status == 0, f"status {run.status}\n{report}"
    out_parts = re.split(r"^scenario (\S+) (\S+)\n", run.stdout, flags=re.M)
    names, starts, outs = out_parts[1::3], out_parts[2::3], out_parts[3::3]
    assert name in names and names[-1] == "end", report
    i = names.index(name)
    err_parts = re.split(r"^scenario (\S+)\n", run.stderr, flags=re.M)
    errs = dict(zip(err_parts[1::2], err_parts[2::2]))
    return Part(outs[i], errs[name], float(starts[i + 1]) - float(starts[i]))


@pytest.fixture(scope="module")
def table(request) -> RunTable:
    """The child scripts of the selected tests, ``CONCURRENCY`` at a time."""
    return RunTable(selected_params(request, "args"), run_script, CONCURRENCY)


def line(run: Any, first_word: str) -> List[str]:
    """The words after ``first_word`` of the first line of stdout (of a ``ChildRun`` or
    a ``Part``) that starts with it."""
    found = [ln.split()[1:] for ln in run.stdout.splitlines() if ln.split()[:1] == [first_word]]
    assert found, f"no {first_word!r} line in:\n{run.stdout}\nstderr:\n{run.stderr}"
    return found[0]


def assert_clean_exit(run: ChildRun, status: int = 0) -> None:
    """The script exited by itself with ``status``, in time, leaving nothing."""
    assert not run.problems(), run.problems()
    assert run.status == status, f"status {run.status}\nstdout: {run.stdout}\n{run.stderr}"
    assert run.seconds < RUN_BOUND


def assert_counts(run: Any) -> None:
    """Every env took exactly as many steps as the script's calls that succeeded."""
    expected, *counts = [int(w) for w in line(run, "counts")]
    assert counts and all(c == expected for c in counts), line(run, "counts")


def all_args(front_end: str) -> Tuple[str, ...]:
    return ("all", front_end)


# -- a forked child ---------------------------------------------------------------------

FORK_CASES = [(fe, v) for fe in FRONT_ENDS for scenario, v in in_one_run(fe)
              if scenario == "fork"]


@pytest.mark.parametrize("front_end,variant,args",
                         [(fe, v, all_args(fe)) for fe, v in FORK_CASES])
def test_a_forked_child_leaves_the_parents_workers_alone(front_end, variant, args, table):
    # The child (sys.exit, or del + gc.collect() + os._exit, or close()) used to
    # run alf_env's and multiprocessing's exit hooks on the parent's workers;
    # "use": a pipe request from the child is refused.
    run = part(table.outcome(args), f"fork-{variant}")
    assert run.seconds < RUN_BOUND
    assert run.stderr == ""
    assert line(run, "child") == ["0"]
    assert_counts(run)  # the parent stepped on: 3 steps before the fork, 5 after


# -- copies -----------------------------------------------------------------------------


@pytest.mark.parametrize("front_end,args", [(fe, all_args(fe)) for fe in FRONT_ENDS])
def test_copying_the_env_is_refused_and_leaves_it_working(front_end, args, table):
    # A failed copy.deepcopy used to close the original's pipes (EBADF at the next use).
    run = part(table.outcome(args), "copy")
    assert run.seconds < RUN_BOUND
    assert run.stderr == ""
    name = CLASS_NAMES[front_end]
    refused = [ln for ln in run.stdout.splitlines() if ln.startswith("refused ")]
    assert [ln.split(" of a ")[0] for ln in refused] == [
        "refused copy.deepcopy()", "refused copy.copy()", "refused pickling"]
    for ln in refused:
        assert (f"of a {name} is not possible: its worker processes and pipes cannot be "
                f"copied or pickled. Make a new {name}") in ln
    assert_counts(run)
    assert "closed" in run.stdout.splitlines()


# -- two threads ------------------------------------------------------------------------

_BESIDE = r" from a second thread while another thread is using this environment"
# What the second thread gets (every refusal of a run must match).
REFUSALS = {
    "process": re.compile(r"ConcurrentUseError: ProcessEnvironment of env 1: step\(\)"
                          + _BESIDE),
    "parallel": re.compile(r"ConcurrentUseError: ParallelAlfEnvironment: step\(\)" + _BESIDE),
    "fast": re.compile(r"ConcurrentUseError: FastParallelEnvironment: step\(\)" + _BESIDE),
    "vector": re.compile(r"ConcurrentUseError: FastVectorEnv: step\(\)" + _BESIDE),
    "vector_pipe": re.compile(r"ConcurrentUseError: FastVectorEnv: step\(\)" + _BESIDE),
    # SB3's step is step_async + step_wait: between the two, gymnasium's state check.
    "sb3": re.compile(r"ConcurrentUseError: FastVectorEnv: step_(async|wait)\(\)" + _BESIDE
                      + r"|AlreadyPendingCallError: Calling `step_async` while waiting for a "
                        r"pending call to `step` to complete\."),
}


@pytest.mark.parametrize("front_end,args", [(fe, all_args(fe)) for fe in FRONT_ENDS])
def test_a_second_thread_is_refused_and_its_call_reaches_no_env(front_end, args, table):
    # ParallelAlfEnvironment deadlocked; ProcessEnvironment raised "concurrent
    # poll() invocation" after the refused steps had reached the env;
    # FastVectorEnv wrote the refused call's actions into the first one's rows.
    run = part(table.outcome(args), "threads")
    assert run.seconds < RUN_BOUND
    assert run.stderr == ""
    assert line(run, "overlap") == ["1", "1"]  # one step ran, the one beside it was refused
    refusals = [ln[len("refusal "):] for ln in run.stdout.splitlines()
                if ln.startswith("refusal ")]
    assert refusals
    for refusal in refusals:
        assert REFUSALS[front_end].match(refusal), refusal
    assert_counts(run)


# -- sys.exit() and KeyboardInterrupt in an env -------------------------------------------

EXITS = {"ctor_exit": ("sys.exit(5)", "SystemExit: 5", "exited with code 5"),
         "ctor_kbd": ("raise KeyboardInterrupt", "KeyboardInterrupt", "exited with code 1"),
         "step_exit": ("sys.exit(5)", "SystemExit: 5", "exited with code 5"),
         "step_kbd": ("raise KeyboardInterrupt", "KeyboardInterrupt", "exited with code 1")}


@pytest.mark.parametrize("front_end,variant,args",
                         [(fe, v, ("exit_in", fe, v)) for fe in FRONT_ENDS for v in sorted(EXITS)])
def test_an_env_that_exits_raises_worker_died_error_with_its_traceback(front_end, variant,
                                                                        args, table):
    # sys.exit(5) in a constructor used to end the trainer with status 5 and
    # nothing on stderr (and KeyboardInterrupt looked like Ctrl-C).
    run = table.outcome(args)
    assert_clean_exit(run, status=1)  # an uncaught exception
    raise_site, raised, how = EXITS[variant]
    # One traceback, the trainer's, whose error carries the worker's.
    assert run.stderr.startswith("Traceback (most recent call last):"), run.stderr
    died = [ln for ln in run.stderr.splitlines()
            if ln.startswith("alf_env.errors.WorkerDiedError: ")]
    assert len(died) == 1, run.stderr
    assert died[0].startswith("alf_env.errors.WorkerDiedError: The worker process of env 1 "
                              "died during ") and died[0].endswith(f"{how}."), died[0]
    worker_part = run.stderr.split("\nWorker traceback:\n", 1)[1]
    assert raise_site in worker_part and raised in worker_part, run.stderr
    assert "not raised" not in run.stdout


# -- a stopped worker of a SIGKILLed trainer ----------------------------------------------


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_a_stopped_worker_ends_with_its_sigkilled_trainer(start_method):
    # Its watchdog thread cannot run while it is stopped: it used to live on.
    shm_before = shm_entries()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.hostile_script", "pdeathsig", "vector", "wait",
             start_method], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
            start_new_session=True)
        hang = threading.Timer(CHILD_TIMEOUT, os.killpg, (proc.pid, signal.SIGKILL))
        hang.start()
        pids: List[int] = []
        try:
            words = proc.stdout.readline().split()  # "pids <pid> <pid>" once they step
            err.seek(0)
            assert words[:1] == ["pids"], err.read()
            pids = [int(p) for p in words[1:]]
            assert len(pids) == 2
            os.kill(pids[0], signal.SIGSTOP)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait() == -signal.SIGKILL
            assert wait_all_gone(pids, GONE_BOUND), f"workers {pids} outlived the trainer"
            # multiprocessing's helpers (resource tracker, fork server) end after them.
            assert wait_all_gone(session_processes(proc.pid), GONE_BOUND)
            assert lasting_new_shm_entries(shm_before) == []
        finally:
            hang.cancel()
            kill_leftovers(session_processes(proc.pid) + pids)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


@pytest.mark.parametrize("front_end,args", [(fe, ("pdeathsig", fe, "thread_start"))
                                             for fe in ["process", "vector"]])
def test_workers_started_from_a_thread_that_ends_keep_working(front_end, args, table):
    # The kernel's parent-death signal follows the thread that forked: it is
    # only asked for from the main thread.
    run = table.outcome(args)
    assert_clean_exit(run)
    assert run.stderr == ""
    assert_counts(run)


# -- a closed ProcessEnvironment's attributes ---------------------------------------------


def test_getattr_with_a_default_on_a_closed_env_gives_the_default():
    env = ProcessEnvironment(ProbeEnv, env_id=4)
    env.start()
    assert env.whoami()[0] == 4 and hasattr(env, "whoami")
    env.close()
    assert getattr(env, "whoami", None) is None
    assert not hasattr(env, "whoami")
    with pytest.raises(EnvironmentClosedAttributeError, match=r"env 4 is closed: its "
                       r"attribute 'whoami' cannot be read"):
        env.whoami  # noqa: B018
    with pytest.raises(EnvironmentClosedError, match="env 4 is closed"):
        env.call("whoami")
    with pytest.raises(EnvironmentClosedError, match="env 4 is closed"):
        env.step(0)


def test_a_refused_wait_leaves_its_promise_pending():
    env = ProcessEnvironment(ProbeEnv, env_id=2)
    env.start()
    try:
        added = env.call("add", 1, 2)  # sent before the other thread's call
        sleeper = threading.Thread(target=env.sleep, args=(4.0,))
        sleeper.start()
        time.sleep(1.0)  # the blocking call holds the env from its request to its answer
        with pytest.raises(ConcurrentUseError, match=r"ProcessEnvironment of env 2: waiting "
                                                     r"for an answer from a second thread"):
            added()
        sleeper.join(RUN_BOUND)
        assert added() == 3
        assert env.whoami()[0] == 2  # in step: nothing was lost or sent twice
    finally:
        env.close()
