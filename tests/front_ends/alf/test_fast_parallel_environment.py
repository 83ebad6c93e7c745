"""FastParallelEnvironment beyond the shared contract suite: equivalence with the
pipe path on real envs, copy semantics, job-loop faults and a stress run."""

import functools
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from alf_env.environments import suite_gym
from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.errors import EnvironmentProcessError, EnvTimeoutError, WorkerDiedError
from alf_env.tensor_specs import TensorSpec
from tests.support.alf_envs import CountingEnv
from tests.support.alf_runs import (
    InProcessReference,
    assert_rows_equal,
    assert_same_sequences,
    cartpole,
    image_env,
    random_actions,
    random_env,
    run,
    trivial_env,
)
from tests.support.signals import alarm


@pytest.mark.parametrize("name,ctor,kwargs", [
    ("random-dict-obs", random_env, {}),
    ("random-spares", random_env, {"num_spare_envs_for_reload": 2}),
    ("random-batched", functools.partial(random_env, batch_size=3), {}),
    ("trivial", trivial_env, {}),
    ("image", image_env, {}),
    ("cartpole", cartpole, {"num_spare_envs_for_reload": 1}),
])
def test_identical_time_steps_to_the_pipe_path(name, ctor, kwargs):
    ctors = [functools.partial(ctor, i) for i in range(5)]
    steps = 300
    slow = run(ParallelAlfEnvironment, ctors, steps, **kwargs)
    fast = run(FastParallelEnvironment, ctors, steps, **kwargs)
    assert_same_sequences(slow, fast)
    ended = sum(int(ts.is_last().sum()) for ts in fast)
    assert ended > 5, "the comparison must cover episode ends"


def test_returned_tensors_do_not_alias_shared_rows():
    with FastParallelEnvironment([functools.partial(CountingEnv, env_id=i)
                                  for i in range(2)]) as env:
        first = env.reset()
        kept = first.observation.clone()
        env.step(torch.ones(2, dtype=torch.int64))
        assert torch.equal(first.observation, kept)


def test_zero_copy_views_see_the_next_step():
    with FastParallelEnvironment([functools.partial(CountingEnv, env_id=i)
                                  for i in range(2)], zero_copy=True) as env:
        first = env.reset()
        before = first.observation.clone()
        second = env.step(torch.full((2,), 3, dtype=torch.int64))
        assert torch.equal(first.observation, second.observation)
        assert not torch.equal(first.observation, before)


def test_zero_copy_needs_no_spares():
    with pytest.raises(ValueError, match="zero_copy"):
        FastParallelEnvironment([CountingEnv] * 3, zero_copy=True,
                                num_spare_envs_for_reload=1)


def test_pipe_calls_work_while_workers_run_the_native_loop():
    with FastParallelEnvironment([functools.partial(CountingEnv, env_id=i)
                                  for i in range(3)]) as env:
        env.reset()
        env.step(torch.zeros(3, dtype=torch.int64))
        assert env.render().shape == (2, 2, 3)
        assert env.call_envs_with_same_args("observation_spec") == \
            [TensorSpec((4,))] * 3
        assert env.envs[1].access("_env_id")() == 1
        env.seed([1, 2, 3])
        ts = env.step(torch.zeros(3, dtype=torch.int64))
        assert ts.observation.shape == (3, 4)


def test_worker_killed_mid_step_is_reported_within_a_second():
    ctors = [functools.partial(CountingEnv, env_id=i) for i in range(3)]
    ctors[2] = functools.partial(CountingEnv, env_id=2, fault="hang", fault_phase="step",
                                 fault_step=1)
    env = FastParallelEnvironment(ctors)
    try:
        env.reset()
        victim = env.worker_pids()[2]
        killed_at = []

        def kill():
            killed_at.append(time.monotonic())
            os.kill(victim, signal.SIGKILL)

        killer = threading.Timer(0.3, kill)
        killer.start()
        with pytest.raises(WorkerDiedError, match=r"env 2 .*SIGKILL \(signal 9\)"):
            env.step(torch.zeros(3, dtype=torch.int64))
        reported_at = time.monotonic()
        killer.join()
    finally:
        env.close()
    assert reported_at - killed_at[0] < 1.0  # the contract: within 1 s


class Interrupted(Exception):
    """Raised by a SIGALRM handler, as KeyboardInterrupt is by Ctrl-C."""


def test_signal_interrupts_a_hung_step_and_close_is_bounded(monkeypatch):
    from alf_env.control_plane import shutdown
    monkeypatch.setattr(shutdown, "CLOSE_POLITE_TIMEOUT", 0.5)
    ctors = [functools.partial(CountingEnv, env_id=i) for i in range(2)]
    ctors[1] = functools.partial(CountingEnv, env_id=1, fault="hang", fault_phase="step",
                                 fault_step=1)
    env = FastParallelEnvironment(ctors)
    try:
        env.reset()
        with alarm(Interrupted, 0.3):
            begin = time.monotonic()
            with pytest.raises(Interrupted):
                env.step(torch.zeros(2, dtype=torch.int64))
            assert time.monotonic() - begin < 2.0  # the native wait checks signals
    finally:
        begin = time.monotonic()
        env.close()
        closed_in = time.monotonic() - begin
    # SIGKILL, if SIGTERM did not end it, ends it at once: its wait is the kernel's.
    bound = 0.5 + shutdown.CLOSE_TERMINATE_TIMEOUT + 1.0
    assert closed_in < bound + 1.0


def _counting_envs(num_envs: int, faulty: int, fault: str) -> list:
    """``CountingEnv`` constructors; env ``faulty`` injects ``fault`` at its first step."""
    return [functools.partial(CountingEnv, env_id=i, fault=fault, fault_phase="step",
                              fault_step=1) if i == faulty else
            functools.partial(CountingEnv, env_id=i) for i in range(num_envs)]


@pytest.mark.parametrize("num_envs, num_workers, named", [
    (3, 3, r"^envs \[1\] did not finish step"),              # one env per worker
    (4, 2, r"^envs \[0, 1\] \(worker 0\) did not finish step"),
])
def test_a_timeout_names_only_the_envs_that_did_not_finish(monkeypatch, num_envs,
                                                           num_workers, named):
    # Env 1 hangs; the other workers finish their step. The timeout names the
    # envs of the workers still stepping (and the worker when it hosts
    # several), not every env, nor worker indices.
    from alf_env.control_plane import shutdown
    monkeypatch.setattr(shutdown, "CLOSE_POLITE_TIMEOUT", 0.5)
    env = FastParallelEnvironment(_counting_envs(num_envs, 1, "hang"), timeout=0.5,
                                  num_workers=num_workers)
    try:
        env.reset()
        with pytest.raises(EnvTimeoutError, match=named):
            env.step(torch.zeros(num_envs, dtype=torch.int64))
    finally:
        env.close()


def test_an_exception_of_a_member_names_that_env_not_its_workers_first():
    with FastParallelEnvironment(_counting_envs(4, 3, "raise"), num_workers=2) as env:
        env.reset()
        with pytest.raises(ValueError, match="injected failure") as info:
            env.step(torch.zeros(4, dtype=torch.int64))
        cause = info.value.__cause__
        assert isinstance(cause, EnvironmentProcessError) and cause.env_id == 3
        assert "raised in the worker of env 3 during step" in str(cause)
        assert "worker of env 2" not in "".join(info.value.__notes__)


def test_wrong_observation_shape_is_named_by_the_worker():
    class BadObs(CountingEnv):
        def _obs(self, action):
            return np.zeros(5, np.float32)

    with FastParallelEnvironment([BadObs, BadObs]) as env:
        with pytest.raises(ValueError, match=r"time_step\.observation of shape \(5,\)"):
            env.reset()


def test_stress_many_envs_random_delays_and_resets():
    n, spares, steps = 12, 2, 250
    ctors = [functools.partial(CountingEnv, env_id=i, min_length=1, max_length=6,
                               step_delay_max=0.002) for i in range(n)]
    ref = InProcessReference([CountingEnv(env_id=i, min_length=1, max_length=6)
                              for i in range(n)], num_spares=spares)
    with FastParallelEnvironment(ctors, num_spare_envs_for_reload=spares,
                                 start_serially=False) as env:
        assert_rows_equal(env.reset(), ref.reset())
        for action in random_actions(steps, n - spares, seed=3):
            assert_rows_equal(env.step(action), ref.step(action))


def test_no_fd_growth_over_create_and_close():
    def cycle():
        with FastParallelEnvironment([functools.partial(CountingEnv, env_id=i)
                                      for i in range(2)]) as env:
            env.reset()
            env.step(torch.zeros(2, dtype=torch.int64))

    cycle()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        cycle()
    assert len(os.listdir("/proc/self/fd")) <= before


def half_cheetah(env_id, float_dtype=np.float32):
    return suite_gym.load("HalfCheetah-v5", env_id=env_id, max_episode_steps=10,
                          float_dtype=float_dtype)


@pytest.mark.parametrize("float_dtype,torch_dtype", [(np.float32, torch.float32),
                                                     (None, torch.float64)])
def test_float64_mujoco_env_on_the_shared_rows(monkeypatch, tmp_path, float_dtype,
                                               torch_dtype):
    """MuJoCo spaces are float64: the wrapper's specs (float32 by default, as in
    ALF) size the shared rows, and both paths give the same time steps."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warnings log to the cwd
    ctors = [functools.partial(half_cheetah, i, float_dtype=float_dtype) for i in range(2)]
    slow = run(ParallelAlfEnvironment, ctors, 30)
    fast = run(FastParallelEnvironment, ctors, 30)
    assert_same_sequences(slow, fast)
    assert fast[-1].observation.dtype == torch_dtype and fast[-1].observation.shape == (2, 17)
    assert fast[-1].prev_action.dtype == torch.float32  # HalfCheetah's actions are float32
    assert fast[-1].env_info["x_velocity"].dtype == torch.float64  # info entries keep theirs
    assert sum(int(ts.is_last().sum()) for ts in fast) >= 4  # episode ends covered


@pytest.mark.parametrize("values,expected", [
    ([0, 1, 1, 1], False),
    ([2, 1, 1, 1], True),
    ([1, 1, 1, 2], True),
    ([512, 0, 1], False),      # the bytes of LAST, but not at an entry's start
    ([512, 0, 2], True),
    ([], False),
])
def test_has_last_finds_only_whole_last_entries(values, expected):
    from alf_env.front_ends.alf.fast_parallel_environment import _has_last

    assert _has_last(np.array(values, np.int32)) is expected
    assert _has_last(np.array(values, np.int64)) is expected  # another dtype: compared
