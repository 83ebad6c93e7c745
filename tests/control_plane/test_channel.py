"""Tests of the trainer's end of a worker's pipe: a transfer cut short by a
signal handler's exception (Ctrl-C) and answers that do not unpickle."""

import time

import pytest

from alf_env.control_plane.channel import wait_answers
from alf_env.control_plane.launch import close_all
from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.errors import EnvironmentProcessError, EnvTimeoutError
from tests.support.faults import wait_all_gone
from tests.support.probe_envs import ProbeEnv
from tests.support.signals import alarm

# Larger than a pipe's buffer (64 KiB): a transfer takes several reads or writes.
BIG = bytes(1 << 20)


class Interrupt(BaseException):
    """Raised by a SIGALRM handler, as KeyboardInterrupt is by Ctrl-C."""


@pytest.fixture
def env():
    env = ProcessEnvironment(ProbeEnv)
    env.start()
    yield env
    env.close()


def test_an_interrupted_wait_leaves_the_env_usable(env):
    promise = env.call("sleep", 0.5)
    with alarm(Interrupt, 0.1), pytest.raises(Interrupt):
        promise()
    assert promise() == 0.5  # the answer still comes to its promise
    assert env.call("add", 1, 2)() == 3


def test_a_request_cut_short_leaves_the_env_out_of_step_and_closable(env):
    busy = env.call("sleep", 1.0)  # the worker reads nothing meanwhile
    with alarm(Interrupt, 0.2), pytest.raises(Interrupt):
        env.call("add", (1,), (BIG,))  # blocks once the pipe's buffer is full
    del busy
    with pytest.raises(EnvironmentProcessError,
                       match=r"Interrupt cut short sending a request .* out of step"):
        env.call("add", 1, 2)
    pid = env.pid
    begin = time.monotonic()
    env.close()
    assert time.monotonic() - begin < 3.0  # not polite: the worker is terminated
    assert wait_all_gone([pid], timeout=2.0)


class _Armed:
    """Whether the SIGALRM handler raises (it disarms itself when it does, so
    the test's own bookkeeping outside the env's calls is never interrupted)."""
    on = False


def _interrupt_if_armed(*_):
    if _Armed.on:
        _Armed.on = False
        raise Interrupt()


def test_interrupts_at_any_point_never_give_a_wrong_answer_nor_hang():
    # SIGALRM every 0.3 ms while large requests and answers cross the pipe:
    # each interrupt lands in a wait (the env stays usable) or in a transfer
    # (it falls out of step, for good); no answer ever goes to another
    # request's promise, and no read blocks on a message cut short.
    interrupted, out_of_step, wrong = 0, 0, []
    deadline = time.monotonic() + 20.0
    with alarm(_interrupt_if_armed, 0.0003, 0.0003):
        while out_of_step < 3 and time.monotonic() < deadline:
            env = ProcessEnvironment(ProbeEnv)
            env.start()
            try:
                for i in range(10_000):
                    try:
                        _Armed.on = True
                        promises = [env.call("add", (i, j), (BIG,)) for j in range(3)]
                        values = [promises[2](), promises[0]()]
                        _Armed.on = False
                    except Interrupt:
                        interrupted += 1
                        continue
                    except EnvironmentProcessError as exc:
                        _Armed.on = False
                        assert "out of step" in str(exc)
                        out_of_step += 1
                        break
                    if [v[:2] for v in values] != [(i, 2), (i, 0)]:
                        wrong.append((i, [v[:2] for v in values]))
            finally:
                _Armed.on = False
                pid = env.pid
                env.close()
            assert wait_all_gone([pid], timeout=2.0)
    assert wrong == []
    assert out_of_step == 3, (interrupted, out_of_step)
    assert interrupted >= out_of_step  # every round also had interrupts in waits


def test_an_answer_that_does_not_unpickle_fails_its_request_only(env):
    with pytest.raises(EnvironmentProcessError, match="could not be unpickled") as info:
        env.call("result_only_this_process_unpickles")()
    assert isinstance(info.value.__cause__, AttributeError)
    assert env.call("add", 1, 2)() == 3  # the pipe is in step


def test_close_reads_past_an_answer_that_does_not_unpickle():
    env = ProcessEnvironment(ProbeEnv)
    env.start()
    env.call("result_only_this_process_unpickles")  # never awaited: read by close()
    pid = env.pid
    env.close()  # never raises because of what the worker sent
    assert wait_all_gone([pid], timeout=2.0)


def test_wait_answers_gives_the_first_answers_in_arrival_order_and_uses_none_up():
    envs = [ProcessEnvironment(ProbeEnv, env_id=i) for i in range(3)]
    try:
        for e in envs:
            e.start()
        promises = [envs[0].call("sleep", 2.0), envs[1].call("sleep", 0.0),
                    envs[2].call("sleep", 0.3)]
        assert wait_answers(promises, 1, timeout=10.0) == [1]
        with pytest.raises(EnvTimeoutError, match=r"envs \[0\] gave no answer"):
            wait_answers([promises[0]], timeout=0.05)
        assert wait_answers(promises, 2, timeout=10.0) == [1, 2]
        assert sorted(wait_answers(promises, timeout=10.0)) == [0, 1, 2]
        assert [p() for p in promises] == [2.0, 0.0, 0.3]  # none was used up
    finally:
        close_all(envs)
