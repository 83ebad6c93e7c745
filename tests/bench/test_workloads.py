"""alf_env.bench.workloads: every workload constructs and steps, also in a fresh process."""

import functools
import multiprocessing
import pickle
import sys

import gymnasium as gym
import numpy as np
import pytest

from alf_env.bench import workloads
from alf_env.bench.synthetic_envs import SWEEP_INFO_KEYS, SweepEnv


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_every_workload_constructs_resets_and_steps(name):
    assert workloads.missing_packages(name) == [], "the bench extra is installed here"
    env = workloads.make_env(name, 3)
    try:
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        env.action_space.seed(0)
        for _ in range(3):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs)
            assert np.isfinite(float(reward))
            assert isinstance(terminated, (bool, np.bool_))
            assert isinstance(truncated, (bool, np.bool_))
    finally:
        env.close()


def test_pong_is_envpools_preprocessing():
    env = workloads.make_env("Pong")
    try:
        assert env.observation_space.shape == (4, 84, 84)
        assert env.observation_space.dtype == np.uint8
        assert env.action_space == gym.spaces.Discrete(6)
        base = env.unwrapped
        assert base.spec.id == "ALE/Pong-v5"
        assert base.spec.kwargs["frameskip"] == 1
        assert base.spec.kwargs["repeat_action_probability"] == 0.0
        preprocessing = env.env
        assert isinstance(preprocessing, gym.wrappers.AtariPreprocessing)
        assert preprocessing.frame_skip == 4 and preprocessing.grayscale_obs
    finally:
        env.close()


@pytest.mark.parametrize("name, microseconds", [("S10", 10), ("S1000", 1000)])
def test_sweep_envs_burn_their_cpu_and_fill_a_four_key_float_info(name, microseconds):
    env = workloads.make_env(name, 1)
    assert isinstance(env, SweepEnv) and env.step_seconds == pytest.approx(microseconds * 1e-6)
    _, info = env.reset(seed=0)
    assert tuple(info) == SWEEP_INFO_KEYS
    import time
    begin = time.thread_time()
    for _ in range(5):
        _, _, _, _, info = env.step(0)
    assert time.thread_time() - begin >= 5 * microseconds * 1e-6
    assert tuple(info) == SWEEP_INFO_KEYS and all(type(v) is float for v in info.values())
    assert info["x_velocity"] == 6.0  # changes every step


def test_sweep_family_expands_and_names_are_checked():
    assert workloads.expand(["sweep", "W1", "S30"]) == [*workloads.SWEEP_NAMES, "W1"]
    assert workloads.SWEEP_NAMES == ("S10", "S30", "S100", "S300", "S1000")
    assert workloads.get("Acrobot-v1").envpool_id is None  # any gymnasium id works
    with pytest.raises(ValueError, match="workload 'Nope-v0' is neither one of W1"):
        workloads.get("Nope-v0")


def test_missing_packages_are_named_with_the_extra_that_installs_them(monkeypatch):
    monkeypatch.setitem(workloads.WORKLOADS, "HalfCheetah-v5",
                        workloads.WORKLOADS["HalfCheetah-v5"]._replace(
                            requires=("mujoco", "no_such_module_for_alf_env")))
    assert workloads.missing_packages("HalfCheetah-v5") == ["no_such_module_for_alf_env"]
    assert workloads.missing_note("HalfCheetah-v5") == (
        "not installed: no_such_module_for_alf_env (`pip install alf_env[bench]` adds "
        "this workload)")
    assert workloads.missing_note("W1") is None


def _build_in_fresh_process(name: str, queue) -> None:
    env = pickle.loads(name)()
    obs, _ = env.reset(seed=0)
    env.close()
    queue.put((obs.shape, "torch" in sys.modules, "matplotlib" in sys.modules))


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_constructors_pickle_and_register_ale_in_a_fresh_process(start_method):
    # A spawned worker has not imported ale_py: make_env("Pong") must register it.
    context = multiprocessing.get_context(start_method)
    queue = context.Queue()
    ctor = pickle.dumps(functools.partial(workloads.make_env, "Pong", 0))
    proc = context.Process(target=_build_in_fresh_process, args=(ctor, queue))
    proc.start()
    try:
        shape, torch_loaded, matplotlib_loaded = queue.get(timeout=120)
    finally:
        proc.join(30)
    assert proc.exitcode == 0
    assert shape == (4, 84, 84)
    assert not torch_loaded and not matplotlib_loaded
