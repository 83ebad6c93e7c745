"""Tests of alf_env/control_plane/quiet_pinning.py: lockstep workers pinned one per
CPU while the machine's other processes leave the CPUs idle, given back every CPU
as soon as one does not."""

import os
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

from alf_env.control_plane import quiet_pinning
from alf_env.vector import FastVectorEnv

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) != 2,
                                reason="the plan of 2 workers on exactly 2 CPUs")


@pytest.fixture
def workers():
    """Two idle child processes standing in for workers."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
             for _ in range(2)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


class _Machine:
    """A fake clock and /proc: the machine's busy seconds are ours plus ``others``
    CPUs' worth of every second."""

    def __init__(self):
        self.now = 0.0
        self.others = 0.0
        self.busy_s = 0.0

    def clock(self):
        return self.now

    def busy(self):
        return self.busy_s

    def cpu_of(self, pid):
        return 0.0  # our own processes use nothing: busy_s is the others' alone

    def advance(self, seconds=1.0):
        self.now += seconds
        self.busy_s += self.others * seconds


def _pinning(workers, machine, pids=None):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    return quiet_pinning.QuietPinning(
        lambda: [p.pid for p in workers] if pids is None else pids, plan=cpus, cpus=cpus,
        clock=machine.clock, busy=machine.busy, cpu_of=machine.cpu_of), cpus


def test_workers_are_pinned_one_per_cpu_after_a_quiet_quarter_second(workers):
    machine = _Machine()
    pinning, cpus = _pinning(workers, machine)  # a first sample at start
    machine.advance(0.2)
    pinning.look()  # not due yet: nothing read, nothing pinned
    assert not pinning.pinned
    assert [os.sched_getaffinity(p.pid) for p in workers] == [set(cpus)] * 2
    machine.advance(0.1)
    pinning.look()
    assert pinning.pinned
    assert [os.sched_getaffinity(p.pid) for p in workers] == [{cpus[0]}, {cpus[1]}]
    machine.advance(0.5)
    pinning.look()  # then once a second
    machine.others = 1.0
    machine.advance(0.4)
    pinning.look()
    assert pinning.pinned


@pytest.mark.parametrize("others, pinned", [(0.2, True), (0.3, False), (1.0, False)])
def test_a_process_that_uses_a_quarter_cpu_unpins_them(workers, others, pinned):
    machine = _Machine()
    pinning, cpus = _pinning(workers, machine)
    for _ in range(3):
        machine.advance()
        pinning.look()
    assert pinning.pinned
    machine.others = others
    machine.advance()
    pinning.look()
    assert pinning.pinned is pinned
    expected = [{cpus[0]}, {cpus[1]}] if pinned else [set(cpus)] * 2
    assert [os.sched_getaffinity(p.pid) for p in workers] == expected


def test_a_restarted_worker_is_pinned_after_two_looks(workers):
    machine = _Machine()
    pids = [p.pid for p in workers]
    pinning, cpus = _pinning(workers, machine, pids=pids)
    machine.advance()
    pinning.look()
    assert pinning.pinned
    pids[1] = None  # dead, its restart to come: no figures for the machine now
    machine.advance()
    pinning.look()
    new = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pids[1] = new.pid  # restarted, placed by the OS
        machine.advance()
        pinning.look()  # a new first sample
        assert os.sched_getaffinity(new.pid) == set(cpus)
        machine.advance()
        pinning.look()
        assert os.sched_getaffinity(new.pid) == {cpus[1]}
    finally:
        new.kill()
        new.wait()


def test_machine_and_process_cpu_come_from_proc():
    assert quiet_pinning.machine_busy_s() > 0
    mine = quiet_pinning.process_cpu_s(os.getpid())
    assert mine is not None and mine > 0
    assert quiet_pinning.process_cpu_s(2**22 + 12345) is None  # no such process
    assert quiet_pinning.machine_busy_s("/nowhere/stat") is None


def _step_for(env, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        env.step(np.zeros(env.num_envs, np.int64))


def test_fast_vector_env_pins_its_workers_while_the_machine_is_quiet(monkeypatch):
    # The machine as /proc would show it: quiet (no CPU time but ours), then a
    # process of another program busy on a whole CPU.
    others = [0.0]
    monkeypatch.setattr(quiet_pinning, "process_cpu_s", lambda pid: 0.0)
    monkeypatch.setattr(quiet_pinning, "machine_busy_s",
                        lambda: others[0] * time.monotonic())
    cpus = sorted(os.sched_getaffinity(0))
    with FastVectorEnv([lambda: gym.make("CartPole-v1")] * 4) as env:
        assert env.num_workers == 2 == len(cpus)
        env.reset(seed=0)
        workers = env.worker_pids()
        assert [os.sched_getaffinity(pid) for pid in workers] == [set(cpus)] * 2  # at start
        _step_for(env, 2.2)  # a first look, then a quiet second
        assert [os.sched_getaffinity(pid) for pid in workers] == [{cpus[0]}, {cpus[1]}]
        others[0] = 1.0
        _step_for(env, 2.2)
        assert [os.sched_getaffinity(pid) for pid in workers] == [set(cpus)] * 2


@pytest.mark.parametrize("worker_cpus", [None, "spread"])
def test_other_worker_cpus_are_kept_as_given(monkeypatch, worker_cpus):
    monkeypatch.setattr(quiet_pinning, "process_cpu_s", lambda pid: 0.0)
    monkeypatch.setattr(quiet_pinning, "machine_busy_s", lambda: 0.0)
    cpus = sorted(os.sched_getaffinity(0))
    with FastVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2,
                       worker_cpus=worker_cpus) as env:
        env.reset(seed=0)
        before = [os.sched_getaffinity(pid) for pid in env.worker_pids()]
        _step_for(env, 2.2)
        assert [os.sched_getaffinity(pid) for pid in env.worker_pids()] == before
        assert before == ([set(cpus)] * 2 if worker_cpus is None else [{cpus[0]}, {cpus[1]}])


def test_fast_parallel_environment_pins_its_workers_while_the_machine_is_quiet(monkeypatch):
    torch = pytest.importorskip("torch")
    from alf_env import FastParallelEnvironment
    from alf_env.environments import suite_gym

    monkeypatch.setattr(quiet_pinning, "process_cpu_s", lambda pid: 0.0)
    monkeypatch.setattr(quiet_pinning, "machine_busy_s", lambda: 0.0)
    cpus = sorted(os.sched_getaffinity(0))
    ctors = [lambda env_id: suite_gym.load("CartPole-v1", env_id=env_id)] * 2
    with FastParallelEnvironment(ctors) as env:
        env.reset()
        end = time.monotonic() + 2.2
        while time.monotonic() < end:
            env.step(torch.zeros(env.batch_size, dtype=torch.int64))
        assert [os.sched_getaffinity(pid) for pid in env.worker_pids()] == [{cpus[0]},
                                                                             {cpus[1]}]
