"""alf_env.vector.FastVectorEnv, synchronous mode: the same results as gymnasium's
SyncVectorEnv, value by value, and the same errors as AsyncVectorEnv."""

import functools
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import alf_env.vector
from alf_env.errors import EnvironmentProcessError, EnvTimeoutError, WorkerDiedError
from alf_env.vector import FastVectorEnv
from tests.support.gym_envs import (
    FaultyEnv,
    InfoEnv,
    ModulesEnv,
    SpaceEnv,
    assert_tree_equal,
    info_env,
)
from tests.support.gym_runs import run_both
from tests.support.paths import REPO_ROOT
from tests.support.probe_envs import UnpicklableError

MODES = list(AutoresetMode)
# Generous: only a hang would take this long.
PROMPT_SECONDS = 10.0


def cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_cartpole_matches_sync_vector_env(mode):
    assert run_both([cartpole] * 4, 300, seed=5, autoreset_mode=mode) >= 4


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_dict_tuple_env_with_infos_matches_sync_vector_env(mode):
    assert run_both([info_env] * 3, 300, seed=11, autoreset_mode=mode) >= 10


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP],
                         ids=lambda m: m.name)
def test_envs_per_worker_matches_sync_vector_env(mode):
    fns = [functools.partial(InfoEnv, i) for i in range(6)]
    assert run_both(fns, 150, seed=2, autoreset_mode=mode, envs_per_worker=3) >= 10


def test_large_infos_do_not_block_the_pipe():
    # ~1 MB of info per env per step: more than any pipe buffer holds.
    big = gym.spaces.Box(0, 1, (128 * 1024,), np.float64)
    fns = [functools.partial(SpaceEnv, spaces.Discrete(3), big, episode_length=4)] * 2
    run_both(fns, 6, envs_per_worker=2)


def test_empty_infos_cost_no_pipe_traffic():
    # Counted from the outside: the workers' write syscalls (futex wake-ups
    # are not writes). CartPole's infos are empty, InfoEnv's mostly are not.
    for fn, expect_writes in ((cartpole, False), (info_env, True)):
        with FastVectorEnv([fn] * 2) as env:
            env.reset(seed=0)
            env.action_space.seed(0)
            workers = [psutil.Process(pid) for pid in env.worker_pids()]
            before = [w.io_counters().write_count for w in workers]
            for _ in range(100):  # episodes end and auto-reset meanwhile
                env.step(env.action_space.sample())
            writes = [w.io_counters().write_count - b for w, b in zip(workers, before)]
        assert all(writes) if expect_writes else not any(writes), writes


ACTION_SPACES = {
    "box": spaces.Box(-1, 1, (2,), np.float32),
    "discrete": spaces.Discrete(4, start=1),
    "multi_discrete": spaces.MultiDiscrete([2, 3]),
    "multi_binary": spaces.MultiBinary(3),
    "text": spaces.Text(4, charset="abcé"),
    "one_of": spaces.OneOf((spaces.Discrete(2), spaces.Box(0, 1, (1,), np.float32))),
    "dict_tuple": spaces.Dict({"t": spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(2))),
                               "b": spaces.Box(0, 1, (), np.float64)}),
}

OBSERVATION_SPACES = {
    "box_uint8": spaces.Box(0, 255, (3, 2), np.uint8),
    "discrete": spaces.Discrete(7, start=-3),
    "multi_discrete": spaces.MultiDiscrete([[2, 3], [4, 5]]),
    "multi_binary": spaces.MultiBinary(5),
    "text": spaces.Text(8, min_length=0, charset="xyz€𝄞"),
    "one_of": spaces.OneOf((spaces.Discrete(2), spaces.Text(3),
                            spaces.Box(0, 1, (2,), np.float32))),
    "graph": spaces.Graph(spaces.Box(0, 1, (2,), np.float32), spaces.Discrete(3)),
    "sequence": spaces.Sequence(spaces.Discrete(4)),
    "stacked_sequence": spaces.Sequence(spaces.Box(0, 1, (2,), np.float32), stack=True),
    "mixed": spaces.Dict({"img": spaces.Box(0, 255, (2, 2), np.uint8),
                          "seq": spaces.Sequence(spaces.Discrete(3)),
                          "pair": spaces.Tuple((spaces.Text(2), spaces.Discrete(2)))}),
}


@pytest.mark.parametrize("obs_name", sorted(OBSERVATION_SPACES))
def test_every_observation_space_matches_sync_vector_env(obs_name):
    # Graph and Sequence observations travel on the pipe; the result is the same.
    fn = functools.partial(SpaceEnv, OBSERVATION_SPACES[obs_name], spaces.Discrete(2))
    run_both([fn] * 3, 16, seed=3, envs_per_worker=3 if obs_name == "mixed" else 1)


# SyncVectorEnv's own run (in this process) warns that gymnasium casts the
# tuple it builds for the Box of "dict_tuple".
@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array")
@pytest.mark.parametrize("action_name", sorted(ACTION_SPACES))
def test_every_fixed_size_action_space_reaches_the_envs(action_name):
    # SpaceEnv asserts that its action is in its space and echoes it in the info.
    fn = functools.partial(SpaceEnv, spaces.Discrete(3), ACTION_SPACES[action_name])
    run_both([fn] * 2, 10, seed=4, autoreset_mode=AutoresetMode.SAME_STEP)


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_start_methods_with_closures(context):
    episode = 15  # a closure: spawn and forkserver need cloudpickle for it

    def make():
        return gym.make("CartPole-v1", max_episode_steps=episode)

    assert run_both([make] * 2, 40, seed=1, context=context) >= 2


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_workers_do_not_import_torch(context):
    # FastVectorEnv's workers never use torch; importing it would cost each
    # spawned worker ~1 s of start-up.
    with FastVectorEnv([ModulesEnv] * 2, context=context) as env:
        env.reset(seed=0)
        assert env.call("imported", "alf_env._penv") == (True, True)  # the probe works
        assert env.call("imported", "torch") == (False, False)


def test_importing_the_gymnasium_front_end_does_not_import_torch():
    code = "import sys, alf_env.vector; print(sorted(m for m in sys.modules if m == 'torch'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_reset_seeds_options_and_reset_mask():
    fns = [info_env] * 4
    ref = gym.vector.SyncVectorEnv(fns)
    with FastVectorEnv(fns, envs_per_worker=2) as env:
        seeds = [7, None, 9, 10]
        got, expected = env.reset(seed=seeds), ref.reset(seed=seeds)
        assert_tree_equal(got[0]["pos"][[0, 2, 3]], expected[0]["pos"][[0, 2, 3]])
        assert_tree_equal(env.reset(seed=3, options={"a": 1}),
                          ref.reset(seed=3, options={"a": 1}))
        actions = ref.action_space.sample()
        assert_tree_equal(env.step(actions), ref.step(actions))
        mask = np.array([False, True, False, True])
        options = {"reset_mask": mask, "b": 2}
        assert_tree_equal(env.reset(options=options), ref.reset(options=dict(options)))
        assert "reset_mask" in options  # the caller's dict is left alone
        for _ in range(30):
            actions = ref.action_space.sample()
            assert_tree_equal(env.step(actions), ref.step(actions))
        with pytest.raises(ValueError, match="length|num_envs=4"):
            env.reset(seed=[1, 2])
        with pytest.raises(ValueError, match="at least one True"):
            env.reset(options={"reset_mask": np.zeros(4, bool)})
        with pytest.raises(ValueError, match=r"shape `\(4,\)`"):
            env.reset(options={"reset_mask": np.ones(3, bool)})
    ref.close()


@pytest.mark.parametrize("copy", [True, False])
def test_copy_semantics(copy):
    with FastVectorEnv([info_env] * 2, copy=copy) as env:
        env.action_space.seed(0)
        obs0, _ = env.reset(seed=0)
        first = obs0["pos"].copy()
        obs1 = env.step(env.action_space.sample())[0]
        assert not np.array_equal(obs1["pos"], first)
        if copy:
            np.testing.assert_array_equal(obs0["pos"], first)
        else:  # views of the shared rows: the step overwrote them
            np.testing.assert_array_equal(obs0["pos"], obs1["pos"])
            assert np.shares_memory(obs0["pos"], obs1["pos"])


def test_spaces_metadata_and_pids():
    with FastVectorEnv([info_env] * 4, envs_per_worker=2) as env:
        single = InfoEnv().observation_space
        assert env.single_observation_space == single
        assert env.observation_space == batch_space(single, 4)
        assert env.action_space == batch_space(InfoEnv().action_space, 4)
        assert env.num_envs == 4
        assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert env.metadata["render_modes"] == ["rgb_array"]
        assert env.render_mode == "rgb_array"
        pids = env.worker_pids()
        assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids
        assert sorted(set(env.call("get_pid"))) == sorted(pids)


def test_call_get_attr_set_attr_and_render():
    with FastVectorEnv([functools.partial(InfoEnv, i) for i in range(3)]) as env:
        env.reset(seed=0)
        assert env.get_attr("env_id") == (0, 1, 2)
        assert env.call("get_wrapper_attr", "env_id") == (0, 1, 2)
        env.set_attr("scale", [1.0, 2.0, 3.0])
        assert env.get_attr("scale") == (1.0, 2.0, 3.0)
        env.set_attr("scale", 0.5)
        assert env.get_attr("scale") == (0.5, 0.5, 0.5)
        frames = env.render()
        assert isinstance(frames, tuple) and len(frames) == 3
        assert frames[0].shape == (2, 2, 3)
        with pytest.raises(ValueError, match="expected 3 values"):
            env.set_attr("scale", [1.0])
        with pytest.raises(ValueError, match="use FastVectorEnv.step"):
            env.call("step", 0)
        with pytest.raises(AttributeError) as info:
            env.get_attr("no_such_attribute")
        assert "no_such_attribute" in str(info.value)
        env.call_async("get_pid")
        with pytest.raises(AlreadyPendingCallError):
            env.call_async("get_pid")
        assert len(env.call_wait(timeout=PROMPT_SECONDS)) == 3


def test_mismatched_spaces_name_the_env_and_both_spaces():
    other = functools.partial(SpaceEnv, spaces.Discrete(3), InfoEnv().action_space)
    with pytest.raises(RuntimeError, match=r"env 2 has observation space Discrete\(3\), "
                                           r"but env 0 has Dict"):
        FastVectorEnv([info_env, info_env, other])
    cart = functools.partial(SpaceEnv, gym.make("CartPole-v1").observation_space,
                             spaces.Discrete(3))
    with pytest.raises(RuntimeError, match=r"env 1 has action space Discrete\(3\), but "
                                           r"env 0 has Discrete\(2\)"):
        FastVectorEnv([cartpole, cart])


def test_disabled_mode_refuses_to_step_an_env_that_ended_and_steps_nothing():
    mode = AutoresetMode.DISABLED
    ref = gym.vector.SyncVectorEnv([cartpole] * 3, autoreset_mode=mode)
    refusals = 0
    with FastVectorEnv([cartpole] * 3, autoreset_mode=mode) as env:
        assert_tree_equal(env.reset(seed=3), ref.reset(seed=3))
        push = np.ones(3, dtype=np.int64)  # the poles fall within a few dozen steps
        for t in range(200):
            if not ref._autoreset_envs.any():
                assert_tree_equal(env.step(push), ref.step(push), f"step {t}")
                continue
            ended = np.flatnonzero(ref._autoreset_envs).tolist()
            with pytest.raises(AssertionError, match=re.escape(f"envs {ended} ended")):
                env.step(push)
            refusals += 1
            # The refused step stepped no env (gymnasium's steps the envs
            # before the first ended one): after resetting the ended ones both
            # go on with the same values.
            mask = ref._autoreset_envs.copy()
            assert_tree_equal(env.reset(options={"reset_mask": mask.copy()}),
                              ref.reset(options={"reset_mask": mask}), f"reset {t}")
    assert refusals >= 3
    with pytest.raises(AssertionError):  # gymnasium refuses such a step too
        while True:
            ref.step(push)
    ref.close()


def test_bad_actions_raise_and_change_nothing():
    ref = gym.vector.SyncVectorEnv([info_env] * 2)
    with FastVectorEnv([info_env] * 2) as env:
        assert_tree_equal(env.reset(seed=1), ref.reset(seed=1))
        good = (np.array([1, 2]), np.zeros((2, 2), np.float32))
        bad = [
            ((np.array([1, 2]), np.zeros((2, 3), np.float32)),
             r"action\[1\]: expected shape \(2, 2\) .* and dtype float32, got shape \(2, 3\)"),
            ((np.array([1.0, 2.0]), good[1]),
             r"action\[0\]: expected dtype int64 .*got the actions of dtype float64"),
            ((np.array([1, 2, 0]), good[1]), r"action\[0\]: expected shape \(2,\)"),
            (good[0], r"action: expected a tuple of 2 batched values"),
        ]
        for action, message in bad:
            with pytest.raises(ValueError, match=message):
                env.step(action)
        for _ in range(20):
            assert_tree_equal(env.step(good), ref.step(good))
    ref.close()


def test_async_state_errors():
    env = FastVectorEnv([cartpole] * 2)
    with pytest.raises(NoAsyncCallError):
        env.step_wait()
    with pytest.raises(NoAsyncCallError):
        env.reset_wait()
    env.reset_async(seed=0)
    with pytest.raises(AlreadyPendingCallError):
        env.step_async(np.zeros(2, np.int64))
    with pytest.raises(AlreadyPendingCallError):
        env.reset_async()
    with pytest.raises(AlreadyPendingCallError):
        env.get_attr("spec")
    env.reset_wait()
    env.step_async(np.zeros(2, np.int64))
    with pytest.raises(AlreadyPendingCallError):
        env.step_async(np.zeros(2, np.int64))
    with pytest.raises(NoAsyncCallError):
        env.reset_wait()
    env.step_wait()
    env.close()
    env.close()  # idempotent
    assert env.closed
    for call in (lambda: env.reset(), lambda: env.step(np.zeros(2, np.int64)),
                 lambda: env.get_attr("spec"), lambda: env.step_wait()):
        with pytest.raises(ClosedEnvironmentError):
            call()


def test_wait_timeouts_keep_the_call_pending():
    slow = functools.partial(FaultyEnv, delay=0.3)
    with FastVectorEnv([slow] * 2) as env:
        env.reset()
        env.step_async(np.zeros(2, np.int64))
        with pytest.raises(EnvTimeoutError) as info:
            env.step_wait(timeout=0.01)
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, multiprocessing.TimeoutError)
        with pytest.raises(AlreadyPendingCallError):
            env.step_async(np.zeros(2, np.int64))
        obs, rewards, *_ = env.step_wait(timeout=PROMPT_SECONDS)
        np.testing.assert_array_equal(obs[:, 1], [1, 1])


def test_worker_exception_keeps_type_traceback_and_env_usable():
    fns = [functools.partial(FaultyEnv, "raise" if i == 3 else "", at_step=2, env_id=i)
           for i in range(4)]
    with FastVectorEnv(fns, envs_per_worker=2) as env:
        env.reset()
        env.step(np.zeros(4, np.int64))
        with pytest.raises(ValueError, match="injected failure") as info:
            env.step(np.zeros(4, np.int64))
        text = str(info.value.__cause__)
        assert "Worker traceback" in text and "in inject" in text
        assert any("env 3" in note for note in info.value.__notes__)
        obs, _ = env.reset()  # usable again
        obs, *_ = env.step(np.ones(4, np.int64))
        np.testing.assert_array_equal(obs[:, 0], [0, 1, 2, 3])


def test_unpicklable_worker_exception_becomes_environment_process_error():
    with FastVectorEnv([functools.partial(FaultyEnv, "raise_unpicklable")]) as env:
        env.reset()
        with pytest.raises(EnvironmentProcessError, match=UnpicklableError.__name__):
            env.step(np.zeros(1, np.int64))


def test_step_interrupted_while_it_waits_leaves_the_env_usable():
    # Ctrl-C while step() waits: the jobs stay with the workers; the next
    # step lets them finish (their results are dropped), then steps again.
    fns = [functools.partial(FaultyEnv, delay=0.3, env_id=i) for i in range(2)]
    with FastVectorEnv(fns) as env:
        env.reset()

        def interrupt(signum, frame):
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            with pytest.raises(KeyboardInterrupt):
                env.step(np.ones(2, np.int64))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        for steps in (2, 3):  # the interrupted step happened in the envs
            obs, reward, terminated, truncated, _ = env.step(np.ones(2, np.int64))
            np.testing.assert_array_equal(obs, [[0, steps], [1, steps]])
            np.testing.assert_array_equal(reward, [1.0, 1.0])


@pytest.mark.parametrize("fault, what", [("sigkill", "killed by SIGKILL (signal 9)"),
                                         ("exit", "exited with code 3")])
def test_dead_worker_raises_worker_died_error_promptly(fault, what):
    fns = [functools.partial(FaultyEnv, fault if i == 1 else "", at_step=1, env_id=i)
           for i in range(3)]
    env = FastVectorEnv(fns, envs_per_worker=1)
    try:
        env.reset()
        begin = time.monotonic()
        with pytest.raises(WorkerDiedError, match=f"env 1 .*{re.escape(what)}") as info:
            env.step(np.zeros(3, np.int64))
        assert time.monotonic() - begin < PROMPT_SECONDS
        assert info.value.env_id == 1 and info.value.env_ids == [1]
        with pytest.raises(WorkerDiedError):
            env.step(np.zeros(3, np.int64))
    finally:
        env.close()  # does not raise


def test_dead_worker_of_several_envs_names_all_of_them():
    fns = [functools.partial(FaultyEnv, "sigkill" if i == 3 else "", at_step=1, env_id=i)
           for i in range(5)]
    env = FastVectorEnv(fns, num_workers=2)  # envs 0-2 and 3-4
    try:
        env.reset()
        with pytest.raises(WorkerDiedError,
                           match=r"envs \[3, 4\] died during step: killed by SIGKILL") as info:
            env.step(np.zeros(5, np.int64))
        assert info.value.env_ids == [3, 4] and info.value.signal == signal.SIGKILL
        with pytest.raises(WorkerDiedError, match=r"envs \[3, 4\]"):
            env.step(np.zeros(5, np.int64))
    finally:
        env.close()  # does not raise


def test_close_terminate_does_not_wait_for_a_hung_env():
    fns = [functools.partial(FaultyEnv, "hang" if i == 0 else "", at_step=1)
           for i in range(2)]
    env = FastVectorEnv(fns)
    env.reset()
    env.step_async(np.zeros(2, np.int64))
    begin = time.monotonic()
    with pytest.warns(UserWarning, match="pending call to `step`"):
        env.close(terminate=True)
    assert time.monotonic() - begin < PROMPT_SECONDS


def test_close_with_a_timeout_ends_a_hung_env():
    env = FastVectorEnv([functools.partial(FaultyEnv, "hang", at_step=1)])
    env.reset()
    env.step_async(np.zeros(1, np.int64))
    begin = time.monotonic()
    with pytest.warns(UserWarning, match="pending call to `step`"):
        env.close(timeout=0.2)
    assert time.monotonic() - begin < PROMPT_SECONDS


def test_close_waits_for_a_pending_step():
    env = FastVectorEnv([functools.partial(FaultyEnv, delay=0.2)] * 2)
    env.reset()
    env.step_async(np.zeros(2, np.int64))
    with pytest.warns(UserWarning, match="pending call to `step`"):
        env.close()
    assert env.closed


def test_workers_that_ignore_sigterm_are_still_ended_by_terminate():
    def stubborn():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return FaultyEnv("hang", at_step=1)

    env = FastVectorEnv([stubborn])
    env.reset()
    env.step_async(np.zeros(1, np.int64))
    with pytest.warns(UserWarning, match="pending call to `step`"):
        env.close(terminate=True)


def test_make_is_like_gymnasium_make_vec():
    env = alf_env.vector.make("CartPole-v1", 3, max_episode_steps=12,
                              vector_kwargs={"envs_per_worker": 3})
    ref = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync", max_episode_steps=12)
    try:
        assert isinstance(env, FastVectorEnv) and env.spec.id == "CartPole-v1"
        assert_tree_equal(env.reset(seed=0), ref.reset(seed=0))
        ref.action_space.seed(0)
        for _ in range(30):
            actions = ref.action_space.sample()
            assert_tree_equal(env.step(actions), ref.step(actions))
    finally:
        env.close()
        ref.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="envs_per_worker"):
        FastVectorEnv([cartpole] * 3, envs_per_worker=2)
    with pytest.raises(ValueError, match="batch_size"):
        FastVectorEnv([cartpole] * 2, batch_size=3)
    with pytest.raises(ValueError, match="context"):
        FastVectorEnv([cartpole], context="thread")
    with pytest.raises(ValueError, match="at least one"):
        FastVectorEnv([])
    with pytest.raises(TypeError, match=r"env_fns\[1\]"):
        FastVectorEnv([cartpole, "CartPole-v1"])


def test_constructor_errors_are_raised_and_clean_up():
    def broken():
        raise KeyError("no such env")

    with pytest.raises(KeyError, match="no such env"):
        FastVectorEnv([cartpole, broken])
