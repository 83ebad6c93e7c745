"""alf_env.data_plane.board_tuning: the default shared-memory front ends tune their
workers while they step, and each choice really takes effect."""

import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf_env.control_plane.openmp import OpenMpPause, loaded_openmp_runtime
from alf_env.control_plane.placement import Placement
from alf_env.data_plane.board_tuning import LONG_JOB_WAIT_SPIN_US, SHORT_JOB_WAIT_SPIN_US

CPUS = len(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(CPUS < 2, reason="pinning needs at least 2 usable CPUs")


def tuner_of(env):
    hook = env._board.step_hook
    return None if hook is None else hook.__self__


def make_env(front_end, **kwargs):
    """The env, its worker pids and one step of it."""
    if front_end == "vector":
        from alf_env.vector import FastVectorEnv
        env = FastVectorEnv([lambda: gym.make("CartPole-v1")] * (2 * CPUS), **kwargs)
        env.reset(seed=0)
        return env, [w.pid for w in env._workers], lambda: env.step(
            np.zeros(env.num_envs, np.int64))
    from alf_env.environments import suite_gym
    from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
    env = FastParallelEnvironment(
        [lambda env_id: suite_gym.load("CartPole-v1", env_id=env_id)] * (2 * CPUS), **kwargs)
    env.reset()
    return env, [e.pid for e in env._envs], lambda: env.step(
        torch.zeros(env.batch_size, dtype=torch.int64))


@needs_two_cpus
@pytest.mark.parametrize("front_end", ["vector", "fast_parallel"])
def test_default_front_ends_choose_every_knob_and_apply_what_they_chose(front_end):
    env, pids, step = make_env(front_end)
    try:
        tuner = tuner_of(env)
        assert [k.name for k in tuner.knobs] == ["openmp_pause", "placement",
                                                 "job_wait_spin_us"]
        assert tuner.values == {"placement": Placement.OS,
                                "job_wait_spin_us": SHORT_JOB_WAIT_SPIN_US,
                                "openmp_pause": True}
        pause, = tuner.before_step
        assert pause.enabled  # the value the tuner starts from is in effect
        assert all(os.sched_getscheduler(pid) == os.SCHED_OTHER for pid in pids)
        assert [len(os.sched_getaffinity(pid)) for pid in pids] == [CPUS] * len(pids)
        for _ in range(100_000):  # windows last 64 cycles and 50 ms at least
            if len(tuner.decisions) == 3:
                break
            step()
        assert [d.knob for d in tuner.decisions] == ["openmp_pause", "placement",
                                                     "job_wait_spin_us"]
        chosen = {d.knob: d.chosen for d in tuner.decisions}
        assert tuner.values == chosen
        expected = 1 if chosen["placement"] is Placement.PINNED else CPUS
        assert [len(os.sched_getaffinity(pid)) for pid in pids] == [expected] * len(pids)
        assert env._board.controller.job_wait_spin_us == chosen["job_wait_spin_us"]
        assert pause.enabled is chosen["openmp_pause"]
    finally:
        env.close()


@needs_two_cpus
@pytest.mark.parametrize("worker_cpus", ["spread", None])
def test_a_placement_the_user_asked_for_is_kept(worker_cpus):
    env, pids, _ = make_env("vector", worker_cpus=worker_cpus)
    try:
        assert "placement" not in tuner_of(env).values
        assert all(os.sched_getscheduler(pid) == os.SCHED_OTHER for pid in pids)
    finally:
        env.close()


@pytest.mark.parametrize("spin_us", [0, 200])
def test_a_spin_the_user_fixed_is_kept(spin_us):
    env, _, _ = make_env("fast_parallel", spin_us=spin_us)
    try:
        assert "job_wait_spin_us" not in tuner_of(env).values
    finally:
        env.close()


def test_the_spin_knob_sets_the_cap_of_every_workers_job_wait():
    env, _, _ = make_env("vector")
    try:
        tuner = tuner_of(env)
        spin = next(k for k in tuner.knobs if k.name == "job_wait_spin_us")
        spin.set(LONG_JOB_WAIT_SPIN_US)
        assert env._board.controller.job_wait_spin_us == LONG_JOB_WAIT_SPIN_US
        spin.set(SHORT_JOB_WAIT_SPIN_US)
        assert env._board.controller.job_wait_spin_us == SHORT_JOB_WAIT_SPIN_US
    finally:
        env.close()


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


@needs_two_cpus
def test_the_openmp_pause_releases_the_pool_of_torchs_threads():
    assert loaded_openmp_runtime() is not None  # torch is imported
    pause = OpenMpPause()
    assert pause.available
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(256, 256)
        x @ x  # starts the pool
        with_pool = thread_count()
        pause()  # not enabled: nothing happens
        assert thread_count() == with_pool
        pause.set(True)
        pause()
        assert thread_count() < with_pool
        x @ x  # torch starts it again when it needs it
        assert thread_count() == with_pool
    finally:
        torch.set_num_threads(threads)


def test_without_an_openmp_runtime_the_pause_is_unavailable(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n")
    assert loaded_openmp_runtime(str(maps)) is None
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /opt/torch/lib/libgomp-a34b3233.so.1\n")
    assert loaded_openmp_runtime(str(maps)) == "/opt/torch/lib/libgomp-a34b3233.so.1"
