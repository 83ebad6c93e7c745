"""The pieces both batched ALF front ends are built from (front_ends/alf/workers.py),
and how they are put together: each front end is an ``AlfEnvironment`` that sets
every attribute it reads."""

import importlib
import threading

import pytest

from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.errors import (
    ConcurrentUseError,
    EnvironmentClosedError,
    EnvironmentProcessError,
    EnvTimeoutError,
    WorkerDiedError,
)
from alf_env.front_ends.alf.workers import CallGuard, check_seeds

FRONT_ENDS = ["alf_env.front_ends.alf.fast_parallel_environment.FastParallelEnvironment",
              "alf_env.front_ends.alf.parallel_environment.ParallelAlfEnvironment"]


def _raise(error: BaseException):
    def fail(*args):
        raise error
    return fail


def test_the_guard_runs_a_call_with_its_arguments():
    guard = CallGuard("Env")
    assert guard.run("a call", lambda a, b: a + b, 1, 2) == 3
    assert not guard.refused
    guard.check()  # nothing to refuse


def test_an_error_of_an_env_leaves_the_guard_open():
    guard = CallGuard("Env")
    with pytest.raises(KeyError):
        guard.run("step()", _raise(KeyError("env 1 failed")))
    assert not guard.refused
    assert guard.run("step()", lambda: "stepped") == "stepped"


def test_a_death_refuses_every_later_call_with_that_death():
    guard = CallGuard("Env")
    death = WorkerDiedError(2, -9, "step")
    with pytest.raises(WorkerDiedError):
        guard.run("step()", _raise(death))
    assert guard.refused
    ran = []
    with pytest.raises(WorkerDiedError, match=r"env 2 died during step") as info:
        guard.run("seed()", lambda: ran.append(1))
    assert info.value is death and ran == []


def test_a_timeout_refuses_later_calls_and_names_it():
    guard = CallGuard("Env")
    timeout = EnvTimeoutError("envs [1] did not finish step within 1 s")
    with pytest.raises(EnvTimeoutError):
        guard.run("step()", _raise(timeout))
    with pytest.raises(EnvironmentProcessError,
                       match=r"this Env is unusable: an earlier wait timed out \(envs \[1\] "
                             r"did not finish step within 1 s\)") as info:
        guard.check()
    assert info.value.__cause__ is timeout


def test_a_closed_guard_says_closed_even_when_broken():
    guard = CallGuard("Env")
    guard.break_with(WorkerDiedError(0, 1))
    guard.close()
    with pytest.raises(EnvironmentClosedError, match="Env is closed; create a new environment"):
        guard.run("reset()", lambda: None)


def test_a_second_thread_is_refused_while_one_is_inside():
    guard = CallGuard("Env")
    inside, leave = threading.Event(), threading.Event()

    def slow_step():
        inside.set()
        assert leave.wait(10)

    thread = threading.Thread(target=guard.run, args=("step()", slow_step))
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(ConcurrentUseError, match=r"Env: seed\(\) from a second thread"):
            guard.run("seed()", lambda: None)
    finally:
        leave.set()
        thread.join()
    assert not guard.refused  # the refusal is no fault of the env
    assert guard.run("seed()", lambda: "seeded") == "seeded"


def test_check_seeds_wants_one_seed_per_env():
    assert check_seeds((3, 4), 2, 0) == [3, 4]
    with pytest.raises(ValueError, match=r"seeds: expected 3 seeds \(one per env\), got 2"):
        check_seeds([1, 2], 3, 0)
    with pytest.raises(ValueError, match=r"seeds: expected 3 seeds \(one per env, spares "
                                         r"included\), got 4"):
        check_seeds([1, 2, 3, 4], 3, 1)


@pytest.mark.parametrize("dotted", FRONT_ENDS)
def test_each_front_end_is_an_alf_environment(dotted):
    # That each reads only its own attributes: tests/test_layout.py.
    module, name = dotted.rsplit(".", 1)
    assert issubclass(getattr(importlib.import_module(module), name), AlfEnvironment)
