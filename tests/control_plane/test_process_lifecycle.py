"""Life cycle of the workers inside one process: the registry of live workers,
``shutdown()`` (what the exit hook and SIGTERM run), ``close_all`` interrupted, the wait
after SIGKILL, and attribute forwarding of ``ProcessEnvironment``.

How a whole training script ends (no ``close()``, Ctrl-C, SIGTERM, SIGKILL, ...)
is tests/faults/test_endings.py: real child scripts, one table for every
front end and start method.
"""

import builtins
import copy
import functools
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import List, Optional

import numpy as np
import psutil
import pytest
import torch

from alf_env.control_plane import shutdown
from alf_env.control_plane.launch import close_all, start_environments
from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.environments.random_alf_environment import RandomAlfEnvironment
from alf_env.errors import EnvironmentClosedError
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec
from alf_env.vector import FastVectorEnv
from tests.support.faults import Fault, FaultyAlfEnv, FaultyGymEnv, good_gym_action, wait_all_gone
from tests.support.signals import alarm

NUM_ENVS = 10
BOUND = 2.0   # seconds to stop every worker of the process (the bound)
SLACK = 2.0   # the machine is shared: generous
PROMPT = 10.0  # only a hang takes this long


def random_env(env_id: Optional[int] = None) -> RandomAlfEnvironment:
    return RandomAlfEnvironment(TensorSpec((2,), torch.float32),
                                BoundedTensorSpec((), torch.int64, 0, 3), env_id=env_id,
                                seed=100 + (env_id or 0))


class SlowClose(FaultyAlfEnv):
    """Takes 30 s to close."""

    def _close(self) -> None:
        time.sleep(30.0)


# -- the registry and shutdown() ----------------------------------------------------


def test_shutdown_stops_every_live_worker_of_every_front_end_at_once():
    pe_envs = [ProcessEnvironment(functools.partial(FaultyAlfEnv, env_id=i), env_id=i)
               for i in range(NUM_ENVS)]
    for env in pe_envs:
        env.start()
    ctors = [functools.partial(FaultyAlfEnv, env_id=i) for i in range(NUM_ENVS)]
    par = ParallelAlfEnvironment(ctors)
    fast = FastParallelEnvironment(ctors)
    vec = FastVectorEnv([functools.partial(FaultyGymEnv, env_id=i) for i in range(3)],
                        envs_per_worker=1)
    fast.reset()
    vec.reset()
    vec.step_async(good_gym_action())  # a job in flight: brought back first
    pids = ([env.pid for env in pe_envs] + par.worker_pids() + fast.worker_pids()
            + vec.worker_pids())
    registered = {worker.process.pid for worker in shutdown._registry.envs.values()}
    begin = time.monotonic()
    shutdown.shutdown()
    assert time.monotonic() - begin < BOUND + SLACK
    assert set(pids) <= registered
    assert wait_all_gone(pids, timeout=0.5)
    assert not shutdown._registry.envs
    with pytest.raises(EnvironmentClosedError):
        pe_envs[0].reset()
    with pytest.raises(EnvironmentClosedError):
        fast.step(torch.zeros(NUM_ENVS, dtype=torch.int64))
    # The front ends' own close() is quick and quiet afterwards (FastVectorEnv's
    # warns of the step left pending, as AsyncVectorEnv's does).
    for env in (par, fast):
        env.close()
    with pytest.warns(UserWarning, match="pending call to `step`"):
        vec.close()


def test_shutdown_needs_no_thread_and_no_import(monkeypatch):
    # What the exit hook runs must work while the interpreter shuts down.
    ctors = [functools.partial(FaultyAlfEnv, env_id=i) for i in range(2)]
    single = ProcessEnvironment(FaultyAlfEnv, env_id=0)
    single.start()
    par, fast = ParallelAlfEnvironment(ctors), FastParallelEnvironment(ctors)
    vec = FastVectorEnv([functools.partial(FaultyGymEnv, env_id=i) for i in range(3)],
                        envs_per_worker=1)
    fast.reset()
    vec.reset()
    vec.step_async(good_gym_action())
    pids = [single.pid] + par.worker_pids() + fast.worker_pids() + vec.worker_pids()
    imported, threads = [], []
    real_import = builtins.__import__

    def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name not in sys.modules:
            imported.append(name)
        return real_import(name, globals, locals, fromlist, level)

    def no_thread(thread):
        threads.append(thread.name)
        raise RuntimeError("can't create new thread at interpreter shutdown")

    with monkeypatch.context() as patch:
        patch.setattr(builtins, "__import__", watched_import)
        patch.setattr(threading.Thread, "start", no_thread)
        shutdown.shutdown()
    assert (imported, threads) == ([], [])
    assert wait_all_gone(pids, timeout=0.5)
    for env in (par, fast):
        env.close()
    with pytest.warns(UserWarning, match="pending call to `step`"):
        vec.close()


def test_a_closed_env_leaves_the_registry_and_can_be_collected():
    env = ProcessEnvironment(FaultyAlfEnv, env_id=0)
    env.start()
    assert shutdown._registry.envs[id(env.channel)] is env.channel
    env.close()
    assert id(env.channel) not in shutdown._registry.envs


def test_an_env_dropped_without_close_is_collected_and_ends_its_worker():
    # The registry holds it weakly: `del` frees it (no cycle), which ends the
    # worker (terminated, reaped) without waiting for the env's close().
    env = ProcessEnvironment(functools.partial(SlowClose, env_id=0), env_id=0)
    env.start()
    pid = env.pid
    begin = time.monotonic()
    del env
    assert time.monotonic() - begin < shutdown.CLOSE_TERMINATE_TIMEOUT + SLACK
    assert not psutil.pid_exists(pid)  # reaped, not a zombie
    assert not shutdown._registry.envs


def test_close_all_stops_workers_together_not_one_after_another(monkeypatch):
    # Each worker's close takes 30 s: with a 0.5 s polite wait for all of them
    # together, 10 workers take about 0.5 s plus SIGTERM, not 10 times that.
    monkeypatch.setattr(shutdown, "CLOSE_POLITE_TIMEOUT", 0.5)
    envs = [ProcessEnvironment(functools.partial(SlowClose, env_id=i), env_id=i)
            for i in range(NUM_ENVS)]
    start_environments(envs, start_serially=False)
    pids = [env.pid for env in envs]
    begin = time.monotonic()
    close_all(envs)
    assert time.monotonic() - begin < 0.5 + shutdown.CLOSE_TERMINATE_TIMEOUT + SLACK
    assert wait_all_gone(pids, timeout=0.5)


def test_ctrl_c_during_close_all_kills_the_workers_and_is_raised():
    envs = [ProcessEnvironment(functools.partial(SlowClose, env_id=i), env_id=i)
            for i in range(3)]
    start_environments(envs, start_serially=False)
    pids = [env.pid for env in envs]

    begin = time.monotonic()
    with alarm(KeyboardInterrupt, 0.3), pytest.raises(KeyboardInterrupt):
        close_all(envs)
    assert time.monotonic() - begin < 0.3 + SLACK
    assert wait_all_gone(pids, timeout=0.5)
    assert not any(id(env.channel) in shutdown._registry.envs for env in envs)


def _sigkill_late(monkeypatch, delay: Optional[float]) -> "List[threading.Timer]":
    """Makes every ``Process.kill()`` take effect ``delay`` s late (``None``: never), as on a
    stalled machine or for a worker stuck in the kernel; returns the timers started."""
    timers: List[threading.Timer] = []

    def kill(process) -> None:
        if delay is not None:
            timers.append(threading.Timer(delay, os.kill, (process.pid, signal.SIGKILL)))
            timers[-1].start()

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "kill", kill)
    return timers


def test_a_worker_slow_to_die_after_sigkill_is_reaped_quietly(monkeypatch, caplog):
    # Ctrl-C during close_all: the workers are killed, and the kernel takes 1.5 s to end
    # them (a loaded machine). The wait lasts as long as that, nothing is reported, and
    # no child is left for the interpreter's exit.
    timers = _sigkill_late(monkeypatch, 1.5)
    envs = [ProcessEnvironment(functools.partial(SlowClose, env_id=i), env_id=i)
            for i in range(3)]
    start_environments(envs, start_serially=False)
    pids = [env.pid for env in envs]
    begin = time.monotonic()
    with caplog.at_level(logging.WARNING), alarm(KeyboardInterrupt, 0.3), \
            pytest.raises(KeyboardInterrupt):
        close_all(envs)
    assert 0.3 + 1.5 <= time.monotonic() - begin < 0.3 + 1.5 + SLACK
    for timer in timers:
        timer.join()
    assert caplog.records == []
    assert not any(psutil.pid_exists(pid) for pid in pids)  # reaped, not zombies
    assert not [p for p in multiprocessing.active_children() if p.pid in pids]


def test_a_worker_still_there_after_sigkill_is_reported_and_left_to_the_system(
        monkeypatch, caplog):
    # SIGKILL that does not end the worker within KILL_TIMEOUT (stuck in the kernel):
    # close() returns in its bound, names the env and the pid, and multiprocessing
    # forgets the process, so that the interpreter's exit does not wait for it.
    _sigkill_late(monkeypatch, None)
    monkeypatch.setattr(shutdown, "CLOSE_TERMINATE_TIMEOUT", 0.2)
    monkeypatch.setattr(shutdown, "KILL_TIMEOUT", 0.3)
    env = ProcessEnvironment(functools.partial(SlowClose, env_id=4), env_id=4)
    env.start()
    pid = env.pid
    os.kill(pid, signal.SIGSTOP)  # nor does SIGTERM end it
    try:
        begin = time.monotonic()
        with caplog.at_level(logging.WARNING):
            env.close(polite_timeout=0.2)
        assert time.monotonic() - begin < 0.2 + 0.2 + 0.3 + SLACK
        assert (f"env 4: the worker (pid {pid}) was still there after SIGKILL; left for "
                f"the system to reap") in caplog.text
        assert not [p for p in multiprocessing.active_children() if p.pid == pid]
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# -- attribute forwarding --------------------------------------------------------------


@pytest.mark.parametrize("kind, message", [
    ("raise", "env 1: close() raised in the worker"),
    ("exit", "env 1: the worker died while closing: exited with code 3")])
def test_close_logs_the_failure_of_a_worker_that_ended_before_the_wait(
        kind, message, monkeypatch, caplog):
    # The worker gets CLOSE and ends (its env's close() raised, or it
    # exited) before close_all looks at it: its failure is still logged.
    env = ProcessEnvironment(functools.partial(FaultyAlfEnv, env_id=1,
                                               fault=Fault(kind, "close", env_id=1)),
                             env_id=1)
    env.start()
    pid = env.pid
    original = shutdown.Stopping.__init__

    def after_the_exit(self, worker, polite):
        worker.process.join(PROMPT)  # the worker read CLOSE and ended
        original(self, worker, polite)

    monkeypatch.setattr(shutdown.Stopping, "__init__", after_the_exit)
    with caplog.at_level(logging.WARNING):
        close_all([env])
    assert message in caplog.text
    assert not psutil.pid_exists(pid)  # reaped


def test_single_underscore_attributes_are_forwarded():
    env = ProcessEnvironment(random_env, env_id=3)
    env.start()
    try:
        np.testing.assert_array_equal(env._rng.get_state()[1],
                                      random_env(3)._rng.get_state()[1])
        with pytest.raises(AttributeError, match="_no_such_name"):
            env._no_such_name  # noqa: B018 -- raised by the worker's env
        assert env._episode_end_probability == 0.1
    finally:
        env.close()


def test_dunder_attributes_are_not_forwarded():
    env = ProcessEnvironment(random_env)
    env.start()
    try:
        sent = env.channel.next_seq
        with pytest.raises(AttributeError, match="__no_such_dunder__"):
            env.__no_such_dunder__  # noqa: B018
        with pytest.raises(TypeError, match=r"copy\.copy\(\) of a ProcessEnvironment is "
                                            r"not possible"):
            copy.copy(env)  # refused up front: no dunder probe reaches the worker
        assert env.channel.next_seq == sent
    finally:
        env.close()


def test_attributes_of_an_env_not_yet_started_are_not_forwarded():
    env = ProcessEnvironment(random_env)
    with pytest.raises(RuntimeError, match="not started"):
        env._rng  # noqa: B018


@pytest.mark.parametrize("cls", [ParallelAlfEnvironment, FastParallelEnvironment])
def test_private_attributes_through_the_envs_of_a_batched_env(cls):
    with cls([random_env] * 3) as env:
        for i, worker in enumerate(env.envs):
            np.testing.assert_array_equal(worker._rng.get_state()[1],
                                          random_env(i)._rng.get_state()[1])
        env.reset()
        for i, worker in enumerate(env.envs):  # the live state, after draws
            local = random_env(i)
            local.reset()
            np.testing.assert_array_equal(worker._rng.get_state()[1],
                                          local._rng.get_state()[1])
        env.step(torch.zeros(3, dtype=torch.int64))  # still in step
