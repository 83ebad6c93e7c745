"""Tests of ProcessEnvironment: the enum-typed pipe protocol and its faults."""

import faulthandler
import functools
import gc
import multiprocessing
import os
import signal
import sys
import time
import weakref

import numpy as np
import psutil
import pytest

from alf_env.control_plane import shutdown
from alf_env.environments.process_environment import MessageType, ProcessEnvironment
from alf_env.errors import (
    EnvironmentClosedError,
    EnvironmentProcessError,
    EnvTimeoutError,
    WorkerDiedError,
)
from tests.support.probe_envs import NoEnvIdProbe, ProbeEnv, UnpicklableError

START_METHODS = ["fork", "spawn", "forkserver"]
# Generous bound for "promptly": the machine is shared and noisy.
PROMPT = 5.0


@pytest.fixture
def make_env():
    """Creates ProcessEnvironments and closes every one of them after the test."""
    created = []

    def make(constructor=ProbeEnv, start=True, fault="", fault_phase="call", **kwargs):
        if fault:
            constructor = functools.partial(constructor, fault=fault,
                                            fault_phase=fault_phase)
        env = ProcessEnvironment(constructor, **kwargs)
        created.append(env)
        if start:
            env.start()
        return env

    yield make
    for env in created:
        env.close()


def test_message_type_has_the_protocol_members():
    names = {m.name for m in MessageType}
    assert {"READY", "ACCESS", "CALL", "RESULT", "EXCEPTION", "CLOSE"} <= names


@pytest.mark.parametrize("start_method", START_METHODS)
def test_call_and_access_with_every_start_method(make_env, start_method):
    offset = 10

    def closure(env_id):  # a closure: needs cloudpickle under spawn/forkserver
        env = ProbeEnv(env_id=env_id + offset)
        return env

    env = make_env(closure, env_id=2, start_method=start_method)
    assert env.call("add", 2, b=3)() == 5
    assert env.env_id == 2
    assert env.access("env_id")() == 12
    assert env.whoami()[1] == env.pid != multiprocessing.current_process().pid


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_lambda_constructor_with_spawn_like_methods(make_env, start_method):
    env = make_env(lambda: NoEnvIdProbe(), start_method=start_method)
    assert env.created is True


def test_env_id_passed_only_when_accepted(make_env):
    assert make_env(ProbeEnv, env_id=7).access("env_id")() == 7
    assert make_env(NoEnvIdProbe, env_id=7).created is True


def test_promises_can_be_resolved_in_any_order(make_env):
    env = make_env()
    promises = [env.call("add", i, 100) for i in range(5)]
    assert promises[3]() == 103
    assert [promises[i]() for i in (4, 0, 2, 1)] == [104, 100, 102, 101]


def test_promise_called_twice_raises(make_env):
    env = make_env()
    promise = env.call("add", 1, 1)
    assert promise() == 2
    with pytest.raises(RuntimeError, match="called once"):
        promise()


def test_dropped_promises_give_up_their_answers(make_env):
    env = make_env()
    env.call("add", 1, 1)  # dropped before its answer arrives
    answered_then_dropped = env.call("add", 2, 2)
    kept = env.call("add", 3, 3)
    last = env.call("add", 4, 4)
    assert last() == 8  # reads every earlier answer on the way
    gone = weakref.ref(answered_then_dropped)
    del answered_then_dropped
    assert gone() is None
    assert kept() == 6
    assert env.channel._waiting == {}  # the channel holds no answer nor promise
    assert env.call("add", 5, 5)() == 10


def _python_calls_while(action) -> list:
    """The Python functions that run while ``action()`` runs (a profile hook)."""
    calls = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


def test_dropping_a_promise_runs_no_python_code(make_env):
    # Python code run by a finalizer swallows what a signal handler raises
    # there ("Exception ignored in ... __del__"): a SIGTERM handler's
    # sys.exit() or a Ctrl-C would be lost while a trainer drops promises.
    env = make_env()
    promises = [env.call("add", 1, 1), env.call("add", 2, 2)]
    assert promises[0]() == 2  # one used, one not
    assert _python_calls_while(promises.clear) == []
    assert env.call("add", 3, 3)() == 6


def test_spec_accessors_are_cached(make_env):
    env = make_env(env_id=3)
    assert env.observation_spec() == ("obs-spec", 3)
    assert env.observation_spec() == ("obs-spec", 3)
    assert env.spec_calls == 1


def test_missing_private_attribute_raises_attribute_error(make_env):
    env = make_env()
    with pytest.raises(AttributeError):
        env._no_such_private_name  # noqa: B018 -- forwarded; the worker's env has none


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="start_method"):
        ProcessEnvironment(ProbeEnv, start_method="threads")
    with pytest.raises(TypeError, match="env_constructor"):
        ProcessEnvironment(42)


# -- exceptions inside the worker ---------------------------------------------


def test_constructor_exception_is_raised_by_start(make_env):
    ctor = functools.partial(ProbeEnv, fault="raise", fault_phase="ctor")
    begin = time.monotonic()
    with pytest.raises(ValueError, match="injected failure") as info:
        make_env(ctor, env_id=4)
    assert time.monotonic() - begin < PROMPT
    cause = info.value.__cause__
    assert isinstance(cause, EnvironmentProcessError)
    assert cause.env_id == 4
    assert "in inject" in cause.remote_traceback
    assert "env 4" in str(cause) and "construction" in str(cause)


@pytest.mark.parametrize("start_method", START_METHODS)
def test_call_exception_keeps_type_and_worker_traceback(make_env, start_method):
    env = make_env(env_id=1, start_method=start_method)
    with pytest.raises(ValueError, match="bad value") as info:
        env.call("raise_value_error", "bad value")()
    cause = info.value.__cause__
    assert isinstance(cause, EnvironmentProcessError)
    assert "raise_value_error" in cause.remote_traceback
    assert "env 1" in str(cause)
    # The worker survives an exception and keeps serving.
    assert env.call("add", 1, 2)() == 3


def test_unpicklable_exception_becomes_environment_process_error(make_env):
    env = make_env(fault="raise_unpicklable", env_id=5)
    with pytest.raises(EnvironmentProcessError) as info:
        env.call("fail")()
    message = str(info.value)
    assert "UnpicklableError" in message and "injected unpicklable failure" in message
    assert "env 5" in message and "in inject" in message
    assert info.value.env_id == 5
    assert not isinstance(info.value, UnpicklableError)


def test_unpicklable_result_is_reported_not_hung(make_env):
    env = make_env(env_id=0)
    with pytest.raises(TypeError, match="pickle"):
        env.call("unpicklable_result")()
    assert env.call("add", 2, 2)() == 4


# -- worker death ---------------------------------------------------------------


class QuietCrashProbe(ProbeEnv):
    """A ``ProbeEnv`` whose crash on purpose prints no "Fatal Python error" dump
    (faulthandler, which pytest enables, is inherited by a forked worker)."""

    def fail(self):
        faulthandler.disable()
        return super().fail()


@pytest.mark.parametrize("fault,expected", [
    ("exit", "exited with code 3"),
    ("sigkill", r"killed by SIGKILL \(signal 9\)"),
    ("segv", r"killed by SIGSEGV \(signal 11\)"),
])
def test_worker_death_raises_worker_died_error(make_env, fault, expected):
    env = make_env(QuietCrashProbe, fault=fault, env_id=1)
    begin = time.monotonic()
    with pytest.raises(WorkerDiedError, match=expected) as info:
        env.call("fail")()
    assert time.monotonic() - begin < PROMPT
    assert info.value.env_id == 1
    assert "env 1" in str(info.value)
    # Later use raises the same error; close() returns quietly.
    with pytest.raises(WorkerDiedError):
        env.call("add", 1, 1)()
    env.close()


def test_worker_killed_from_outside_while_waiting(make_env):
    env = make_env(env_id=6)
    promise = env.call("sleep", 30.0)
    time.sleep(0.2)
    psutil.Process(env.pid).send_signal(signal.SIGKILL)
    begin = time.monotonic()
    with pytest.raises(WorkerDiedError, match="env 6.*SIGKILL") as info:
        promise()
    assert time.monotonic() - begin < 1.0 + 0.5  # the contract says within 1 s
    assert info.value.signal == signal.SIGKILL


@pytest.mark.parametrize("fault", ["exit", "sigkill"])
def test_worker_death_during_construction(make_env, fault):
    ctor = functools.partial(ProbeEnv, fault=fault, fault_phase="ctor")
    with pytest.raises(WorkerDiedError, match="env 2 died during start"):
        make_env(ctor, env_id=2)


def test_close_after_close_fault_still_returns(make_env):
    env = make_env(fault="raise", fault_phase="close")
    env.close()
    env.close()


# -- life cycle ------------------------------------------------------------------


def test_start_twice_is_an_error(make_env):
    env = make_env()
    with pytest.raises(RuntimeError, match="start\\(\\) called twice"):
        env.start()


def test_use_after_close_raises_closed_error(make_env):
    env = make_env()
    env.close()
    env.close()  # idempotent
    with pytest.raises(EnvironmentClosedError):
        env.call("add", 1, 1)
    with pytest.raises(EnvironmentClosedError):
        env.start()


@pytest.mark.parametrize("start_method", START_METHODS)
def test_close_right_after_start(make_env, start_method):
    env = make_env(start=False, start_method=start_method)
    env.start(wait_to_start=False)
    pid = env.pid
    begin = time.monotonic()
    env.close()
    assert time.monotonic() - begin < PROMPT
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_wait_start_is_separate_from_start(make_env):
    env = make_env(start=False)
    env.start(wait_to_start=False)
    env.wait_start()
    env.wait_start()  # already running: returns
    assert env.call("add", 3, 4)() == 7


def test_timeout_on_a_hung_call(make_env):
    env = make_env()
    promise = env.call("sleep", 3600.0)
    with pytest.raises(EnvTimeoutError) as info:
        promise(timeout=0.2)
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, multiprocessing.TimeoutError)


def test_close_of_a_hung_worker_is_bounded(make_env, monkeypatch):
    monkeypatch.setattr(shutdown, "CLOSE_POLITE_TIMEOUT", 0.5)
    env = make_env(fault="hang")
    env.call("fail")
    pid = env.pid
    begin = time.monotonic()
    env.close()
    # SIGKILL, if SIGTERM did not end it, ends it at once: its wait is the kernel's.
    bound = 0.5 + shutdown.CLOSE_TERMINATE_TIMEOUT + 1.0
    assert time.monotonic() - begin < bound + 1.0
    assert not psutil.pid_exists(pid)


def test_closed_env_is_not_kept_alive_by_atexit():
    env = ProcessEnvironment(ProbeEnv)
    env.start()
    ref = weakref.ref(env)
    env.close()
    del env
    gc.collect()
    assert ref() is None


def test_unclosed_env_is_closed_by_the_exit_hook():
    env = ProcessEnvironment(ProbeEnv)
    env.start()
    pid = env.pid
    shutdown.shutdown()  # what the interpreter runs at exit
    assert not psutil.pid_exists(pid)
    with pytest.raises(EnvironmentClosedError):
        env.call("add", 1, 1)


# -- step / reset of an AlfEnvironment ---------------------------------------------


@pytest.mark.parametrize("flatten", [False, True])
def test_step_and_reset_match_in_process_env(make_env, flatten):
    from tests.support.alf_envs import CountingEnv
    env = make_env(CountingEnv, env_id=3, flatten=flatten)
    local = CountingEnv(env_id=3)
    assert env.time_step_spec() == local.time_step_spec()
    first = env.reset()
    assert first.step_type == local.reset().step_type
    for t in range(30):
        action = np.int64(t % 4)
        promise = env.step(action, blocking=False)
        remote, expected = promise(), local.step(action)
        np.testing.assert_array_equal(remote.observation, expected.observation)
        assert (remote.step_type, remote.reward, remote.discount) == \
            (expected.step_type, expected.reward, expected.discount)


@pytest.mark.parametrize("flatten", [False, True])
def test_time_steps_arrive_as_the_env_returned_them(make_env, flatten):
    # Whatever form the action takes, each leaf comes back with the type,
    # dtype, shape and value the env in this process gives.
    import torch

    from alf_env.environments import suite_gym
    from alf_env.environments.random_alf_environment import RandomAlfEnvironment
    from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

    reference = suite_gym.load("CartPole-v1")  # action spec: int64, shape ()
    reference.seed(3)
    env = make_env(lambda: suite_gym.load("CartPole-v1"), flatten=flatten)
    env.seed(3)
    for got, want in ((env.reset(), reference.reset()),
                      (env.step(np.array(1)), reference.step(np.array(1))),
                      (env.step(np.int64(0)), reference.step(0)),
                      (env.step(1), reference.step(1)),
                      (env.step(np.int32(1)), reference.step(1)),
                      (env.step(True), reference.step(1)),
                      (env.step(torch.tensor(0)), reference.step(0))):
        assert type(got) is type(want)
        for a, b in zip(got[:6], want[:6]):
            assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
    tensors = make_env(lambda: RandomAlfEnvironment(
        TensorSpec((2,), torch.float32), BoundedTensorSpec((), torch.int64, 0, 2),
        use_tensor_time_step=True), flatten=flatten)
    assert isinstance(tensors.reset().observation, torch.Tensor)


@pytest.mark.parametrize("flatten", [False, True])
def test_a_wrong_action_is_refused_in_the_worker_naming_env_and_field(make_env, flatten):
    from tests.support.alf_envs import CountingEnv
    env = make_env(CountingEnv, env_id=5, flatten=flatten)
    env.reset()
    first = env.step(np.int64(1))
    with pytest.raises(ValueError, match=r"action: expected dtype int64") as info:
        env.step(np.float32(1.5))
    assert info.value.__cause__.env_id == 5 and "during step" in str(info.value.__cause__)
    # The env was not stepped: the next step is the one after ``first``.
    local = CountingEnv(env_id=5)
    local.reset()
    local.step(np.int64(1))
    np.testing.assert_array_equal(env.step(np.int64(2)).observation,
                                  local.step(np.int64(2)).observation)
    assert first.step_type is not None


@pytest.mark.parametrize("phase", ["reset", "step"])
def test_exception_in_reset_or_step_keeps_type_and_traceback(make_env, phase):
    from tests.support.alf_envs import CountingEnv
    ctor = functools.partial(CountingEnv, fault="raise", fault_phase=phase, fault_step=1)
    env = make_env(ctor, env_id=8)
    with pytest.raises(ValueError, match="injected failure") as info:
        env.reset()
        env.step(np.int64(0))
    cause = info.value.__cause__
    assert cause.env_id == 8 and f"_{phase}" in cause.remote_traceback
    assert f"during {phase}" in str(cause)
    # The worker is still there: other calls work.
    assert env.call("observation_spec")() == CountingEnv().observation_spec()


def test_a_start_that_fails_leaves_a_closable_env(monkeypatch):
    env = ProcessEnvironment(ProbeEnv)

    def refuse(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(env._ctx, "Process", lambda *a, **k: type(
        "P", (), {"start": refuse})())
    with pytest.raises(OSError, match="no more processes"):
        env.start()
    env.close()  # must not raise "can only join a started process"
    env.close()


class ProgressProbe(ProbeEnv):
    """A ProbeEnv that defines ALF's sync_progress hook."""

    def __init__(self, env_id=None):
        super().__init__(env_id)
        self.progress = []

    def sync_progress(self, progress):
        if progress is None:
            raise ValueError("no progress given")
        self.progress.append(progress)


def test_sync_progress_forwards_to_an_env_that_defines_it(make_env):
    """ALF's sync_progress pushes the trainer's progress to the worker's env."""
    env = make_env(ProgressProbe)
    assert env.sync_progress({"iterations": 5}) is True
    promise = env.sync_progress(0.5, blocking=False)
    assert env.call("add", 1, 2)() == 3  # ordered with other requests
    assert promise() is True
    assert env.progress == [{"iterations": 5}, 0.5]
    with pytest.raises(ValueError, match="no progress given"):
        env.sync_progress()
    assert env.call("add", 2, 2)() == 4  # the env stays usable


def test_sync_progress_leaves_an_env_without_it_alone(make_env):
    env = make_env()
    assert env.sync_progress(0.25) is False
    assert env.call("add", 1, 1)() == 2


class _FinalizedInWorker:
    """Part of a reference cycle; its finalizer notes the pid that ran it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cycle = self

    def __del__(self) -> None:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")


def test_a_forked_worker_never_finalizes_garbage_inherited_from_the_parent(make_env,
                                                                           tmp_path):
    # A cycle that is garbage in the parent when the worker forks: its
    # finalizer acts on the parent's resources and must not run in the worker
    # (a Ray client's destructor, run there, crashed workers).
    gc.disable()
    try:
        _FinalizedInWorker(str(tmp_path / "finalized"))  # garbage, not yet collected
        env = make_env(start_method="fork")
    finally:
        gc.enable()
    assert env.call("collect_garbage")() >= 0  # a full collection in the worker
    gc.collect()  # the parent finalizes its own garbage
    assert (tmp_path / "finalized").read_text().split() == [str(os.getpid())]
    # What the worker itself makes later is collected there as usual.
    assert env.call("collect_garbage")() == 0
