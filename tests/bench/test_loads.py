"""alf_env.bench.loads: the busy processes of ``--load`` and the policy of ``--policy``."""

import os
import time

import numpy as np
import psutil
import pytest
import torch

from alf_env.bench import backends
from alf_env.bench.core import Actions, Plan
from alf_env.bench.loads import BusyLoad, MlpPolicy, make_policy, observation_of
from alf_env.bench.measure import measure
from alf_env.data_structures import TimeStep


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def test_busy_load_runs_n_spinning_processes_and_reaps_them():
    load = BusyLoad(2).start()
    try:
        pids = load.pids
        assert len(pids) == 2
        assert all(psutil.Process(pid).ppid() == os.getpid() for pid in pids)
        deadline = time.monotonic() + 30
        while min(_cpu_seconds(p) for p in pids) < 0.05 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert min(_cpu_seconds(p) for p in pids) >= 0.05, "the load processes do not spin"
    finally:
        load.stop()
    assert load.pids == []
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids)
    load.stop()  # repeat-safe


@pytest.mark.parametrize("apart", [False, True])
def test_busy_load_apart_runs_in_a_session_of_its_own(apart):
    with BusyLoad(1, apart=apart) as load:
        (pid,) = load.pids
        assert (os.getsid(pid) == pid) is apart
        assert (os.getsid(pid) == os.getsid(0)) is not apart


def test_no_load_starts_nothing_and_a_negative_load_is_refused():
    with BusyLoad(0) as load:
        assert load.pids == []
    with pytest.raises(ValueError, match="--load"):
        BusyLoad(-1)


def test_observation_of_reads_every_kind_of_step_result():
    obs = np.zeros((2, 3))
    assert observation_of((obs, 1.0, False, False, {})) is obs
    time_step = TimeStep(observation=obs)
    assert observation_of(time_step) is obs
    assert observation_of(None) is None


def test_mlp_policy_runs_on_numpy_and_torch_batches_of_any_size():
    policy = MlpPolicy()
    policy(np.zeros((8, 4), np.float64))
    policy(torch.zeros(8, 4, 84, 84, dtype=torch.uint8))  # frames: flattened
    policy(np.zeros((8, 4), np.float32))
    policy(None)  # a step that returned no observation: skipped
    assert policy.forwards == 3
    assert sorted(policy._nets) == [4, 4 * 84 * 84]


def test_torch_threads_are_set_only_when_asked():
    before = torch.get_num_threads()
    try:
        MlpPolicy()
        assert torch.get_num_threads() == before
        MlpPolicy(torch_threads=1)
        assert torch.get_num_threads() == 1
        with pytest.raises(ValueError, match="--torch-threads"):
            MlpPolicy(torch_threads=0)
    finally:
        torch.set_num_threads(before)


def test_make_policy_names():
    assert make_policy("none", None) is None
    assert isinstance(make_policy("mlp", None), MlpPolicy)
    with pytest.raises(ValueError, match="--policy"):
        make_policy("cnn", None)


def test_measure_runs_the_policy_on_every_step_of_a_batched_backend():
    seen = []
    actions = Actions.make("CartPole-v1", 2)
    plan = Plan(warmup=3, steps=7, seconds=0.1)
    run = measure(backends.BACKENDS["gym_sync"].build, "CartPole-v1", 2, actions, plan,
                  policy=seen.append)
    assert run.env_steps == 14
    assert len(seen) == 10
    assert all(isinstance(obs, np.ndarray) and obs.shape == (2, 4) for obs in seen)
