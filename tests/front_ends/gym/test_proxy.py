"""alf_env.GymProxy: one env in its own worker process, as a plain gymnasium.Env.

What a user sees: the checkers of gymnasium and SB3 accept it, training on it
learns exactly what training on the env in-process learns, every value
arrives with its type, attributes and methods reach the worker's env, errors
come home with their type and traceback, nothing is left behind, and with a
restart policy a worker that kills itself is replaced.
"""

import copy
import functools
import gc
import json
import os
import pickle
import signal
import sys
import time
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest

from alf_env import GymProxy
from alf_env.control_plane.restart import RestartPolicy
from alf_env.errors import EnvironmentClosedError, EnvTimeoutError, WorkerDiedError
from tests.front_ends.gym.proxy_envs import (
    DyingEnv,
    FrameEnv,
    MixedInfoEnv,
    OffSpaceEnv,
    RaisingEnv,
)
from tests.support.child_runs import run_module
from tests.support.faults import wait_all_gone
from tests.support.shm_leaks import leaked_shm_entries, shm_entries

CONTEXTS = ("fork", "spawn", "forkserver")
RESTART_SCRIPT = "tests.front_ends.gym.proxy_restart_script"
SCRIPT_TIMEOUT = 120.0


def assert_same(expected: Any, got: Any, path: str = "") -> None:
    """Equal values of the same types, all the way down (dict keys and their order too)."""
    assert type(got) is type(expected), (path, type(expected), type(got))
    if isinstance(expected, dict):
        assert list(got) == list(expected), (path, list(expected), list(got))
        for key in expected:
            assert_same(expected[key], got[key], f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), (path, expected, got)
        for i, (a, b) in enumerate(zip(expected, got)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(expected, np.ndarray):
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape), path
        assert np.array_equal(got, expected), path
    elif isinstance(expected, np.generic):
        assert got.dtype == expected.dtype and got == expected, (path, expected, got)
    else:
        assert got == expected, (path, expected, got)


def run_side_by_side(env_fn: Callable[[], gym.Env], steps: int, context: str = "fork",
                     **proxy_kwargs: Any) -> None:
    """Steps the env in-process and through a proxy with the same seeds and actions;
    every result must be the same, value and type."""
    local = env_fn()
    with GymProxy(env_fn, context=context, **proxy_kwargs) as proxy:
        assert proxy.observation_space == local.observation_space
        assert proxy.action_space == local.action_space
        local.action_space.seed(3)
        assert_same(local.reset(seed=7, options={"k": 1}), proxy.reset(seed=7, options={"k": 1}))
        for _ in range(steps):
            action = local.action_space.sample()
            expected = local.step(action)
            assert_same(expected, proxy.step(action))
            if expected[2] or expected[3]:
                assert_same(local.reset(), proxy.reset())
    local.close()


# -- checkers and training --------------------------------------------------------


# The checker warns of these envs' unbounded Box spaces, in-process as well.
@pytest.mark.filterwarnings("ignore:.*A Box observation space (minimum|maximum) value")
@pytest.mark.parametrize("env_name", ["CartPole-v1", "HalfCheetah-v5"])
def test_gymnasium_and_sb3_checkers_accept_a_proxy(env_name):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with GymProxy.make(env_name) as proxy:
        # The render check builds envs in this process (spec.make), which
        # cannot render here (no pygame, no display).
        check_env(proxy, skip_render_check=True)
        sb3_check_env(proxy)
        assert proxy.spec.id == env_name


def _trained_parameters(make_env: Callable[[], gym.Env]) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    vec_env = DummyVecEnv([make_env] * 2)
    try:
        model = PPO("MlpPolicy", vec_env, n_steps=64, batch_size=64, n_epochs=2, seed=5,
                    device="cpu")
        model.learn(total_timesteps=256)
        return {k: v.clone() for k, v in model.policy.state_dict().items()}
    finally:
        vec_env.close()


def test_ppo_on_proxies_learns_exactly_what_it_learns_on_in_process_envs():
    local = _trained_parameters(lambda: gym.make("CartPole-v1"))
    proxied = _trained_parameters(lambda: GymProxy.make("CartPole-v1"))
    assert list(local) == list(proxied)
    untrained = _untrained_parameters()
    assert any(not np.array_equal(local[k].numpy(), untrained[k].numpy()) for k in local)
    for name in local:
        assert np.array_equal(local[name].numpy(), proxied[name].numpy()), name


def _untrained_parameters() -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    vec_env = DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)
    try:
        model = PPO("MlpPolicy", vec_env, n_steps=64, batch_size=64, seed=5, device="cpu")
        return dict(model.policy.state_dict())
    finally:
        vec_env.close()


def test_a_sync_vector_env_of_proxies_steps_like_one_of_in_process_envs():
    local = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    proxied = gym.vector.SyncVectorEnv([lambda: GymProxy.make("CartPole-v1")] * 3)
    try:
        assert_same(local.reset(seed=11), proxied.reset(seed=11))
        rng = np.random.default_rng(0)
        for _ in range(60):  # episodes end and reset on the next step
            actions = rng.integers(0, 2, 3)
            assert_same(local.step(actions), proxied.step(actions))
    finally:
        local.close()
        proxied.close()


# -- values and types -------------------------------------------------------------


def test_cartpole_through_a_proxy_is_the_in_process_cartpole_value_for_value():
    run_side_by_side(lambda: gym.make("CartPole-v1"), steps=120)


@pytest.mark.parametrize("reward_type", ["float", "float64", "float32"])
def test_rewards_and_mixed_infos_keep_their_types(reward_type):
    run_side_by_side(functools.partial(MixedInfoEnv, reward_type), steps=40)
    with GymProxy(functools.partial(MixedInfoEnv, reward_type)) as proxy:
        proxy.reset(seed=1)
        reward = proxy.step(0)[1]
        assert type(reward) is {"float": float, "float64": np.float64,
                                "float32": np.float32}[reward_type]


def test_a_camera_frame_arrives_exactly_and_is_the_callers_own_copy():
    run_side_by_side(FrameEnv, steps=25)
    with GymProxy(FrameEnv) as proxy:
        first, _ = proxy.reset(seed=0)
        kept = first.copy()
        second = proxy.step(1)[0]
        assert not np.array_equal(first, second)
        assert np.array_equal(first, kept)  # the next step did not overwrite it
        first[:] = 0  # nor does writing into it change the next one
        assert proxy.step(1)[0].any()


@pytest.mark.parametrize("kind", ["float64", "fortran", "dict", "text"])
def test_observations_the_shared_row_cannot_take_arrive_exactly_through_the_pipe(kind):
    run_side_by_side(functools.partial(OffSpaceEnv, kind), steps=8)


def test_with_shared_memory_off_every_value_is_the_same():
    run_side_by_side(FrameEnv, steps=5, shared_memory=False)
    run_side_by_side(functools.partial(MixedInfoEnv, "float32"), steps=15,
                     shared_memory=False)


# fork, the default, is every test above (the same envs, more steps).
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_every_start_method_gives_the_in_process_values(context):
    run_side_by_side(functools.partial(MixedInfoEnv, "float64"), steps=15, context=context)
    run_side_by_side(FrameEnv, steps=3, context=context)
    run_side_by_side(lambda: gym.make("CartPole-v1"), steps=3, context=context)


def test_the_host_puts_only_exactly_fitting_observations_in_the_shared_row():
    from alf_env.data_plane.shared_block import SharedBlock
    from alf_env.front_ends.gym.proxy import IN_BLOCK, ProxyHost

    frame_env = FrameEnv()
    block = SharedBlock([("obs", (480, 640, 3), np.uint8)], num_rows=1, num_workers=1)
    host = ProxyHost(frame_env)
    host._alf_env_attach(block)
    obs, info = host.reset(seed=3)
    assert obs is IN_BLOCK and info == {"frame": 0}
    expected, _ = FrameEnv().reset(seed=3)
    assert np.array_equal(block["obs"][0], expected)
    assert host.step(1)[0] is IN_BLOCK
    host.close()
    small = SharedBlock([("obs", (2, 3), np.float32)], num_rows=1, num_workers=1)
    host = ProxyHost(OffSpaceEnv("float64"))  # not the space's dtype: on the pipe
    host._alf_env_attach(small)
    assert type(host.step(0)[0]) is np.ndarray
    host.close()
    small = SharedBlock([("obs", (2, 3), np.float32)], num_rows=1, num_workers=1)
    host = ProxyHost(OffSpaceEnv("fortran"))  # the space's dtype and shape: in the row
    host._alf_env_attach(small)
    assert host.step(0)[0] is IN_BLOCK
    assert np.array_equal(small["obs"][0], OffSpaceEnv("fortran").step(0)[0])
    host.close()


# -- attributes -------------------------------------------------------------------


def test_attributes_and_methods_reach_the_worker_env():
    with GymProxy(MixedInfoEnv) as proxy:
        assert proxy.unwrapped is proxy
        assert proxy.level == 1
        assert proxy.get_wrapper_attr("level") == 1
        assert proxy.metadata == {"render_modes": ["rgb_array"]}
        assert proxy.render_mode == "rgb_array"
        worker_pid = proxy.pid()
        assert worker_pid == proxy.worker_pid != os.getpid()
        assert proxy.scaled(3.0, factor=4.0) == 12.0
        assert proxy.get_wrapper_attr("scaled")(1.5) == 3.0
        assert proxy.set_wrapper_attr("level", 5) is True
        assert proxy.level == 5
        assert proxy.scaled(1.0) == 10.0  # the worker's env sees the new level
        assert proxy.has_wrapper_attr("level") and not proxy.has_wrapper_attr("nope")
        assert proxy.set_wrapper_attr("nope", 1, force=False) is False
        with pytest.raises(AttributeError, match="nope"):
            _ = proxy.nope
        assert getattr(proxy, "nope", "default") == "default"
        assert not hasattr(proxy, "nope")
        proxy.reset(seed=4)
        assert proxy.np_random_seed == 4
        assert isinstance(proxy.np_random, np.random.Generator)
        assert np.array_equal(proxy.render(), np.zeros((4, 5, 3), np.uint8))


def test_np_random_is_the_worker_envs():
    local = MixedInfoEnv()
    local.reset(seed=9)
    with GymProxy(MixedInfoEnv) as proxy:
        proxy.reset(seed=9)
        assert proxy.np_random.bit_generator.state == local.np_random.bit_generator.state
        assert (proxy._np_random.bit_generator.state
                == local.unwrapped._np_random.bit_generator.state)
        proxy.np_random = np.random.default_rng(1)
        assert (proxy.np_random.bit_generator.state
                == np.random.default_rng(1).bit_generator.state)


def test_a_non_blocking_step_returns_a_promise_of_the_step():
    local = FrameEnv()
    expected_reset = local.reset(seed=2)
    expected = [local.step(a) for a in (1, 0, 1)]
    with GymProxy(FrameEnv) as proxy:
        assert_same(expected_reset, proxy.reset(seed=2))
        promise = proxy.step(1, blocking=False)
        assert callable(promise)
        assert_same(expected[0], promise())
        assert_same(expected[0], promise())  # called again: the same step
        # Two steps in flight: the second does not overwrite the first's frame.
        first, second = proxy.step(0, blocking=False), proxy.step(1, blocking=False)
        assert_same(expected[2], second())
        assert_same(expected[1], first())


def test_a_second_thread_is_refused_and_the_first_threads_step_is_intact():
    import threading

    from alf_env.errors import ConcurrentUseError
    from tests.support.gym_envs import FaultyEnv

    with GymProxy(lambda: FaultyEnv(delay=1.0)) as proxy:
        proxy.reset()
        results = []
        stepper = threading.Thread(target=lambda: results.append(proxy.step(1)))
        stepper.start()
        refused = []
        while stepper.is_alive() and not refused:
            try:
                assert proxy.fault == ""  # a read changes nothing if it gets in first
            except ConcurrentUseError as exc:
                refused.append(exc)
        stepper.join()
        assert refused, "the second thread was never refused"
        assert results[0][0].tolist() == [0.0, 1.0] and results[0][1] == 1.0
        assert proxy.step(0)[0].tolist() == [0.0, 2.0]  # nothing was sent for it


def test_a_proxy_refuses_pickle_and_copies():
    with GymProxy.make("CartPole-v1") as proxy:
        for copier in (pickle.dumps, copy.deepcopy, copy.copy):
            with pytest.raises(TypeError, match="GymProxy"):
                copier(proxy)
        proxy.reset()  # unchanged


# -- errors -----------------------------------------------------------------------


def test_an_env_exception_comes_back_with_its_type_traceback_and_env_id():
    with GymProxy(RaisingEnv) as proxy:
        proxy.reset()
        proxy.step(0)
        with pytest.raises(KeyError, match="the sensor went away at step 2") as info:
            proxy.step(0)
        cause = info.value.__cause__
        assert "env 0" in str(cause) and "during step" in str(cause)
        assert "Traceback" in cause.remote_traceback
        assert "in step" in cause.remote_traceback and "proxy_envs.py" in cause.remote_traceback
        assert proxy.step(0)[1] == 0.0  # the worker lives on


def test_a_worker_killed_by_sigkill_raises_worker_died_error_naming_it():
    proxy = GymProxy.make("CartPole-v1")
    try:
        proxy.reset()
        os.kill(proxy.worker_pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match=r"killed by SIGKILL \(signal 9\)") as info:
            proxy.step(0)
        assert info.value.signal == signal.SIGKILL
        with pytest.raises(WorkerDiedError):  # still dead: no restart policy
            proxy.reset()
    finally:
        proxy.close()


def test_a_constructor_error_is_raised_by_the_proxy_and_leaves_no_worker():
    def broken() -> gym.Env:
        raise ValueError("no simulator on this machine")

    with pytest.raises(ValueError, match="no simulator on this machine"):
        GymProxy(broken)
    with pytest.raises(TypeError, match="env_fn"):
        GymProxy("CartPole-v1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context"):
        GymProxy(FrameEnv, context="thread")


def test_a_timeout_bounds_a_slow_answer():
    from tests.support.gym_envs import FaultyEnv

    with GymProxy(lambda: FaultyEnv(delay=2.0), timeout=0.2) as proxy:
        proxy.reset()
        with pytest.raises(EnvTimeoutError):
            proxy.step(0)


# -- life cycle -------------------------------------------------------------------


def test_close_is_idempotent_and_a_closed_proxy_says_so():
    proxy = GymProxy.make("CartPole-v1")
    pid = proxy.worker_pid
    proxy.close()
    proxy.close()
    assert wait_all_gone([pid], 5.0)
    with pytest.raises(EnvironmentClosedError):
        proxy.step(0)
    with pytest.raises(AttributeError, match="closed"):
        _ = proxy.gravity


def test_the_context_manager_closes_the_worker():
    with GymProxy.make("CartPole-v1") as proxy:
        pid = proxy.worker_pid
        proxy.reset()
    assert wait_all_gone([pid], 5.0)


def test_a_dropped_proxy_ends_its_worker_without_the_cycle_collector():
    gc.disable()
    try:
        proxy = GymProxy(FrameEnv)
        proxy.reset(seed=0)
        proxy.step(1, blocking=False)  # a promise left uncalled
        pid = proxy.worker_pid
        del proxy
        assert wait_all_gone([pid], 5.0)
    finally:
        gc.enable()


# Each start method once (the worker is the script's child, a fresh interpreter, or
# the fork server's child), each ending at least once: how the script ends is
# the same for every start method (the exit hook runs after the traceback).
@pytest.mark.parametrize("context, how", [("fork", "return"), ("spawn", "raise"),
                                          ("forkserver", "return"), ("fork", "raise")])
def test_a_script_that_ends_with_its_proxy_open_leaves_no_worker(context, how):
    run = run_module("tests.front_ends.gym.proxy_exit_script", [context, how], SCRIPT_TIMEOUT)
    assert run.status == (0 if how == "return" else 1), run.stderr
    assert ("the training loop failed" in run.stderr) == (how == "raise")
    pid = int(run.stdout.split()[0])
    assert wait_all_gone([pid], 5.0)
    assert not run.session_left and not run.new_shm


def test_frames_leave_nothing_in_dev_shm():
    before = shm_entries()
    for context in CONTEXTS:
        with GymProxy(FrameEnv, context=context) as proxy:
            proxy.reset(seed=0)
            proxy.step(0)
            assert leaked_shm_entries(before, linger=0.1) == []
    assert leaked_shm_entries(before) == []


# -- restarts ---------------------------------------------------------------------


def _run_restart_script(*args: Any) -> dict:
    """The script's JSON result, its log in ``"log"``; it must exit 0 and leave nothing."""
    run = run_module(RESTART_SCRIPT, [str(a) for a in args], SCRIPT_TIMEOUT)
    assert run.status == 0, run.stderr
    assert not run.session_left and not run.new_shm
    assert "Fatal Python error" not in run.stderr
    result: dict = json.loads(run.stdout.strip().splitlines()[-1])
    assert wait_all_gone(result["pids"], 5.0)
    result["log"] = run.stderr
    return result


@pytest.mark.parametrize("fault", ["sigkill", "segv", "exit"])
def test_a_worker_that_kills_itself_once_is_restarted_and_the_run_goes_on(fault, tmp_path):
    result = _run_restart_script(fault, 3, tmp_path / "died", 2, 6)
    assert result["error"] is None
    steps = result["steps"]
    assert len(steps) == 6
    first_pid, new_pid = result["pids"]
    assert [s["obs"] for s in steps[:2]] == [[first_pid, 1.0], [first_pid, 2.0]]
    # The step that saw the death: the new episode's first observation, flagged.
    assert steps[2] == {"obs": [new_pid, 0.0], "reward": 0.0, "reward_type": "float",
                        "terminated": False, "truncated": True, "restarted": True}
    assert [s["obs"] for s in steps[3:]] == [[new_pid, 1.0], [new_pid, 2.0],
                                             [new_pid, 3.0]]
    assert not any(s["restarted"] for s in steps[3:])
    assert result["log"].count("restarting them") == 1
    assert "restarting them (restart 1 of 2)" in result["log"]


def test_a_death_during_reset_restarts_and_resets(tmp_path):
    result = _run_restart_script("exit", 0, tmp_path / "died", 1, 2)
    assert result["error"] is None and result["reset_restarted"] is True
    assert len(result["pids"]) == 2
    new_pid = result["pids"][1]
    assert [s["obs"] for s in result["steps"]] == [[new_pid, 1.0], [new_pid, 2.0]]


def test_past_the_budget_the_death_is_raised_and_no_process_is_left():
    result = _run_restart_script("sigkill", 3, "-", 1, 10)
    assert result["error"]["type"] == "WorkerDiedError"
    assert "killed by SIGKILL" in result["error"]["message"]
    assert [s["restarted"] for s in result["steps"]] == [False, False, True, False, False]
    assert len(result["pids"]) == 2


def test_restarts_are_off_by_default_and_a_policy_is_checked():
    with pytest.raises(TypeError, match="restart_policy"):
        GymProxy(FrameEnv, restart_policy=3)  # type: ignore[arg-type]
    with GymProxy(lambda: DyingEnv("sigkill", 1)) as proxy:
        proxy.reset()
        with pytest.raises(WorkerDiedError):
            proxy.step(0)


def test_a_rebuild_slower_than_start_timeout_counts_and_past_the_budget_raises(tmp_path):
    marker = str(tmp_path / "died")
    policy = RestartPolicy(max_restarts=1, start_timeout=0.5)
    with GymProxy(lambda: DyingEnv("sigkill", 2, marker, rebuild_delay=60.0),
                  restart_policy=policy) as proxy:
        proxy.reset()
        proxy.step(0)
        begin = time.monotonic()
        with pytest.raises(WorkerDiedError, match=r"killed by SIGKILL") as info:
            proxy.step(0)
        assert time.monotonic() - begin < 30.0  # the 60 s rebuild was not waited for
        assert isinstance(info.value.__cause__, EnvTimeoutError)
        with pytest.raises(WorkerDiedError):
            proxy.reset()  # past the budget: broken, only close() is left


def test_a_rebuilt_env_with_other_spaces_is_a_failed_restart(tmp_path):
    marker = str(tmp_path / "died")
    policy = RestartPolicy(max_restarts=2)
    with GymProxy(lambda: DyingEnv("sigkill", 1, marker, rebuilt_size=3),
                  restart_policy=policy) as proxy:
        proxy.reset()
        with pytest.raises(WorkerDiedError, match="SIGKILL") as info:
            proxy.step(0)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "the restarted env has observation space Box(0.0, inf, (3,)" in str(
            info.value.__cause__)


def test_a_restart_within_this_process_reattaches_the_shared_row():
    policy = RestartPolicy(max_restarts=3)
    with GymProxy(FrameEnv, restart_policy=policy) as proxy:
        proxy.reset(seed=0)
        os.kill(proxy.worker_pid, signal.SIGKILL)
        obs, reward, terminated, truncated, info = proxy.step(1)
        assert (reward, terminated, truncated, info) == (0.0, False, True,
                                                        {"frame": 0, "env_restarted": True})
        assert obs.shape == (480, 640, 3) and obs.dtype == np.uint8
        assert (obs[0] == 255).all()  # the first frame: row 0 white
        step = proxy.step(1)
        assert step[4] == {"frame": 1} and (step[0][1, :, 0] == 255).all()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
