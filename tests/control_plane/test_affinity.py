"""Tests of the ``worker_cpus`` option (alf_env/control_plane/affinity.py) on every backend."""

import functools
import os

import psutil
import pytest

from alf_env.bench.synthetic_envs import make_synthetic_env
from alf_env.control_plane import affinity
from alf_env.control_plane.affinity import pin_workers, pinned_cpus, plan_worker_cpus, usable_cpus
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.vector import FastVectorEnv

CPUS = usable_cpus()


def _alf_env(env_id: int = 0) -> AlfGymWrapper:
    return AlfGymWrapper(make_synthetic_env("W1", env_id), env_id=env_id)


def _alf_backend(cls, num_envs, **kwargs):
    return cls([functools.partial(_alf_env) for _ in range(num_envs)], **kwargs)


def _vector_backend(num_envs, envs_per_worker=1, **kwargs):
    return FastVectorEnv([functools.partial(make_synthetic_env, "W1", i) for i in range(num_envs)],
                         envs_per_worker=envs_per_worker, **kwargs)


BACKENDS = {
    "parallel": functools.partial(_alf_backend, ParallelAlfEnvironment),
    "fast": functools.partial(_alf_backend, FastParallelEnvironment),
    "vector": _vector_backend,
}


def _worker_cpus(env):
    return [os.sched_getaffinity(pid) for pid in env.worker_pids()]


def test_plan_spread_and_lists():
    assert plan_worker_cpus(None, 5) is None
    assert plan_worker_cpus("spread", 5) == [CPUS[i % len(CPUS)] for i in range(5)]
    assert plan_worker_cpus([CPUS[-1]], 3) == [CPUS[-1]] * 3
    assert plan_worker_cpus((CPUS[0], CPUS[-1]), 3) == [CPUS[0], CPUS[-1], CPUS[0]]


@pytest.mark.parametrize("value, message", [
    ("everywhere", r"worker_cpus: expected None, 'auto', 'spread' or a sequence of CPU ids, "
                   r"got the string 'everywhere'"),
    (3, r"worker_cpus: expected None, 'auto', 'spread' or a sequence of CPU ids, got 3"),
    ([], r"worker_cpus: expected at least one CPU id, got an empty sequence"),
    ([0.5], r"worker_cpus: expected integer CPU ids, got 0.5"),
    ([True], r"worker_cpus: expected integer CPU ids, got True"),
    ([max(CPUS) + 1], rf"worker_cpus: CPU {max(CPUS) + 1} is not one this process may run on"),
])
def test_plan_rejects_bad_values(value, message):
    with pytest.raises(ValueError, match=message):
        plan_worker_cpus(value, 2)


def test_pin_names_the_worker_that_failed():
    dead = psutil.Popen(["true"])
    dead.wait()
    with pytest.raises(OSError, match=rf"cannot pin worker 0 \(pid {dead.pid}\) to CPU"):
        pin_workers([dead.pid], [CPUS[0]])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_spread_pins_each_worker_round_robin(backend):
    env = BACKENDS[backend](3, worker_cpus="spread")
    try:
        assert _worker_cpus(env) == [{CPUS[i % len(CPUS)]} for i in range(3)]
        env.reset()  # the pinned workers work
    finally:
        env.close()


@pytest.mark.parametrize("cpus, num_workers, lockstep, spread", [
    ([0, 1], 2, True, True),        # a worker per CPU, in lockstep
    ([0, 1], 8, True, True),        # more workers than CPUs
    ([0, 1, 2, 3], 3, True, False),  # fewer workers than CPUs: several trainings would pile up
    ([0, 1], 2, False, False),      # not in lockstep (asynchronous mode, spares, pipes)
    ([5], 4, True, False),          # one CPU: nothing to spread over
])
def test_auto_plans_a_spread_for_lockstep_workers_that_cover_every_cpu(
        monkeypatch, cpus, num_workers, lockstep, spread):
    monkeypatch.setattr(affinity, "usable_cpus", lambda: list(cpus))
    expected = [cpus[i % len(cpus)] for i in range(num_workers)] if spread else None
    assert plan_worker_cpus("auto", num_workers, lockstep=lockstep) == expected
    assert pinned_cpus("auto", expected) is None  # planned, never pinned
    assert pinned_cpus("spread", expected) == expected


def _placement(env):
    """'os' if no worker is pinned."""
    cpus = _worker_cpus(env)
    assert cpus == [set(CPUS)] * len(cpus), cpus
    return "os"


@pytest.mark.parametrize("backend, kwargs", [
    ("vector", {}),                            # synchronous, a worker per CPU
    ("fast", {}),                              # no spares, a worker per CPU
    ("parallel", {}),                          # the pipe path
    ("vector", {"worker_cpus": None}),
    ("fast", {"worker_cpus": None}),
    ("vector", {"batch_size": 1}),             # the asynchronous mode
    ("fast", {"num_spare_envs_for_reload": 1}),  # spares
    ("parallel", {"worker_cpus": "auto"}),
])
def test_default_placement_is_the_os_and_stays_so_while_stepping(backend, kwargs):
    num_envs = len(CPUS) + (1 if "num_spare_envs_for_reload" in kwargs else 0)
    if kwargs.get("batch_size") == 1:
        num_envs = max(2, len(CPUS))  # the asynchronous mode needs more envs than the batch
    env = BACKENDS[backend](num_envs, **kwargs)
    try:
        assert _placement(env) == "os"
        env.reset()
        if backend == "vector":
            for _ in range(50):
                env.step(env.action_space.sample())
        assert _placement(env) == "os"
    finally:
        env.close()


def test_sb3_front_end_starts_its_workers_placed_by_the_os():
    from alf_env.sb3 import FastSubprocVecEnv

    fns = [functools.partial(make_synthetic_env, "W1", i) for i in range(len(CPUS))]
    env = FastSubprocVecEnv(fns, "fork", envs_per_worker=1)
    try:
        assert _placement(env._vector_env) == "os"
        env.reset()
    finally:
        env.close()


def test_auto_leaves_fewer_workers_than_cpus_to_the_os(monkeypatch):
    # Pretend the machine has one CPU more than the workers: the OS places them.
    monkeypatch.setattr(affinity, "usable_cpus", lambda: CPUS + [max(CPUS) + 1])
    env = _vector_backend(len(CPUS))
    try:
        assert _worker_cpus(env) == [set(CPUS)] * len(CPUS)
    finally:
        env.close()


def test_vector_pins_workers_not_envs():
    env = _vector_backend(4, envs_per_worker=2, worker_cpus=[CPUS[-1]])
    try:
        assert _worker_cpus(env) == [{CPUS[-1]}] * 2
    finally:
        env.close()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_bad_value_raises_before_any_worker_starts(backend):
    before = psutil.Process().children()
    with pytest.raises(ValueError, match="worker_cpus"):
        BACKENDS[backend](2, worker_cpus=[max(CPUS) + 1])
    assert psutil.Process().children() == before


@pytest.mark.parametrize("backend", ["fast", "vector"])
@pytest.mark.parametrize("worker_cpus, cap_us", [
    (None, 2000), ("spread", 5000), ("auto", 5000 if len(CPUS) > 1 else 2000)])
def test_spread_workers_let_the_trainer_spin_longer(backend, worker_cpus, cap_us):
    # As many workers as CPUs: oversubscribed (the trainer makes one more), so
    # spinning only yields; workers spread over the CPUs, pinned or placed by
    # the OS under "auto", raise the adaptive cap (see csrc/futex.h).
    env = BACKENDS[backend](len(CPUS), worker_cpus=worker_cpus)
    try:
        controller = env._board.controller
        assert controller.spin_yields_only
        assert controller.spin_budget_us == cap_us
    finally:
        env.close()


# -- the workers' scheduling policy ---------------------------------------------------


def _policy(pid: int) -> int:
    return os.sched_getscheduler(pid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_pipe_workers_run_under_sched_batch_shared_memory_ones_normally(backend, context):
    env = BACKENDS[backend](2, start_method=context) if backend != "vector" else \
        BACKENDS[backend](2, context=context)
    expected = os.SCHED_BATCH if backend == "parallel" else os.SCHED_OTHER
    try:
        env.reset()
        assert [_policy(pid) for pid in env.worker_pids()] == [expected] * 2
        assert _policy(0) == os.SCHED_OTHER  # the trainer keeps its policy
    finally:
        env.close()


@pytest.mark.parametrize("error", [PermissionError(1, "Operation not permitted"),
                                   OSError(5, "Input/output error")])
def test_batch_scheduling_keeps_the_normal_policy_where_the_os_refuses(error, monkeypatch,
                                                                       caplog):
    def refuse(pid, policy, param):
        raise error

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with caplog.at_level("INFO"):
        assert affinity.batch_scheduling() is False
    assert f"SCHED_BATCH not available ({error.strerror})" in caplog.text
    assert _policy(0) == os.SCHED_OTHER

