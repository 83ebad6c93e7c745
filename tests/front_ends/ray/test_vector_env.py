"""RayVectorEnv on a local Ray instance: the FastVectorEnv contract (SyncVectorEnv
value for value, async mode, calls, state errors) and its faults (env
exceptions, timeouts, killed actors, the restart policy, bounded close)."""

import contextlib
import functools
import multiprocessing
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode

from alf_env.distributed import ActorDiedError, RayVectorEnv, RestartPolicy
from alf_env.errors import EnvTimeoutError, WorkerDiedError
from tests.support.gym_envs import FaultyEnv, assert_tree_equal, info_env
from tests.support.paths import REPO_ROOT
from tests.support.ray import KEEP_PIDS, kill_actor

# Generous: only a hang would take this long.
PROMPT_SECONDS = 20.0
# Zero CPUs: the actors fit on 2 CPUs however many a test makes.
FIT = {"num_cpus": 0}

pytestmark = pytest.mark.usefixtures("ray_local")


def cartpole():
    return gym.make("CartPole-v1")


def faulty(fault, bad_env, at_step=1, delay=0.0, n=4):
    return [functools.partial(FaultyEnv, fault if i == bad_env else "", at_step=at_step,
                              delay=delay, env_id=i) for i in range(n)]


def make(env_fns, num_actors=2, **kwargs):
    return RayVectorEnv(env_fns, num_actors=num_actors, actor_options=FIT, **kwargs)


def pids_of(env):
    return [p for a in env.actor_info() for p in [a["pid"], *a["worker_pids"]]]


@contextlib.contextmanager
def kept(env):
    """Shares ``env`` between the tests of this module: its processes may
    outlive a test, and must be gone once the module closes it."""
    pids = pids_of(env)
    KEEP_PIDS.update(pids)
    try:
        yield env
    finally:
        env.close()
        KEEP_PIDS.difference_update(pids)
        assert_gone(pids)


@pytest.fixture(scope="module")
def info_envs(ray_local):
    """3 InfoEnvs on 2 actors, synchronous (tests that leave it usable)."""
    with kept(make([info_env] * 3)) as env:
        yield env


@pytest.fixture(scope="module")
def async_cartpoles(ray_local):
    """4 CartPoles on 2 actors, batch_size=2 (tests that leave it usable)."""
    with kept(make([cartpole] * 4, batch_size=2)) as env:
        yield env


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_gone(pids):
    deadline = time.monotonic() + PROMPT_SECONDS
    alive = [p for p in pids if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _alive(p)]
    assert not alive, f"processes {alive} outlived the env"


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
def test_matches_sync_vector_env_over_hundreds_of_steps(mode):
    """Uneven shares (2 + 3 envs), Dict/Tuple spaces, infos of every kind."""
    fns = [info_env] * 5
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    env = make(fns, autoreset_mode=mode)
    ends = 0
    try:
        assert [a["envs"] for a in env.actor_info()] == [[0, 1], [2, 3, 4]]
        assert env.single_observation_space == ref.single_observation_space
        assert env.action_space == ref.action_space
        assert env.metadata["autoreset_mode"] is mode
        assert_tree_equal(env.reset(seed=7), ref.reset(seed=7))
        ref.action_space.seed(3)
        for t in range(200):
            if mode is AutoresetMode.DISABLED and ref._autoreset_envs.any():
                options = {"reset_mask": ref._autoreset_envs.copy()}
                assert_tree_equal(env.reset(options=dict(options)), ref.reset(options=options))
            actions = ref.action_space.sample()
            expected = ref.step(actions)
            assert_tree_equal(env.step(actions), expected, f"step {t}")
            ends += int(np.sum(expected[2] | expected[3]))
        assert_tree_equal(env.reset(seed=[1, None, 3, 4, 5])[0]["pos"][[0, 2]],
                          ref.reset(seed=[1, None, 3, 4, 5])[0]["pos"][[0, 2]])
    finally:
        env.close()
        ref.close()
    assert ends > 20  # autoreset was exercised


def test_async_mode_returns_whole_actors_and_each_env_steps_as_alone():
    num_envs, batch = 6, 4  # 3 actors of 2 envs; recv returns 2 actors
    refs = [gym.vector.SyncVectorEnv([cartpole]) for _ in range(num_envs)]
    last = [ref.reset(seed=i)[0][0] for i, ref in enumerate(refs)]
    rng = np.random.default_rng(0)
    with make([cartpole] * num_envs, num_actors=3, batch_size=batch) as env:
        assert env.observation_space.shape == (batch, 4)
        obs, info = env.reset(seed=0)
        counts = np.zeros(num_envs, int)
        for _ in range(100):
            ids = info["env_id"]
            assert ids.dtype == np.int32 and len(ids) == batch
            assert sorted(ids.tolist()[:2]) in ([0, 1], [2, 3], [4, 5])
            for row, i in enumerate(ids):
                np.testing.assert_array_equal(obs[row], last[i])
            actions = rng.integers(0, 2, batch)
            for a, i in zip(actions, ids):
                last[i] = refs[i].step(np.array([a]))[0][0]
                counts[i] += 1
            env.send(actions, ids)
            obs, _, _, _, info = env.recv()
        assert counts.min() > 0, counts  # no actor was starved
    for ref in refs:
        ref.close()


def test_send_returns_at_once_and_recv_returns_the_first_actors_to_finish():
    # The slow actor's steps take 2 s: a send that waited for one is told apart
    # from one that returns at once even on a busy machine.
    fns = [functools.partial(FaultyEnv, "", delay=2.0 if i < 2 else 0.0, env_id=i)
           for i in range(4)]
    with make(fns, batch_size=2) as env:
        env.async_reset()
        first = env.recv(timeout=PROMPT_SECONDS)[-1]["env_id"].tolist()
        second = env.recv(timeout=PROMPT_SECONDS)[-1]["env_id"].tolist()
        assert sorted([first, second]) == [[0, 1], [2, 3]]
        env.send(np.zeros(2, np.int64), [0, 1])  # the slow actor
        begin = time.monotonic()
        env.send(np.zeros(2, np.int64), [2, 3])
        assert time.monotonic() - begin < 1.0  # in flight while the trainer works
        assert env.recv(timeout=PROMPT_SECONDS)[-1]["env_id"].tolist() == [2, 3]
        assert env.recv(timeout=PROMPT_SECONDS)[-1]["env_id"].tolist() == [0, 1]


def test_send_and_recv_check_their_arguments(async_cartpoles):
    env = async_cartpoles
    env.async_reset()
    ids = env.recv()[-1]["env_id"]
    other = env.recv()[-1]["env_id"]
    with pytest.raises(NoAsyncCallError):
        env.recv()  # nothing in flight
    for bad in ([ids[0]], [7, 8], list(ids[::-1])):
        with pytest.raises(ValueError, match="env_ids"):
            env.send(np.zeros(len(bad), np.int64), bad)
    with pytest.raises(ValueError, match="action"):
        env.send(np.zeros(3, np.int64), ids)
    env.send(np.zeros(2, np.int64), ids)
    with pytest.raises(ValueError, match="still in flight"):
        env.send(np.zeros(2, np.int64), ids)
    env.send(np.zeros(2, np.int64), other)
    assert sorted(env.recv()[-1]["env_id"].tolist() + env.recv()[-1]["env_id"].tolist()) \
        == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="batch_size"):
        make([cartpole] * 4, batch_size=3)
    with pytest.raises(ValueError, match="num_actors"):
        make([cartpole] * 2, num_actors=3)
    with pytest.raises(ValueError, match="DISABLED"):
        make([cartpole] * 4, batch_size=2, autoreset_mode=AutoresetMode.DISABLED)


def test_call_get_attr_set_attr_and_render(info_envs):
    env = info_envs
    env.reset(seed=0)
    assert len(env.call("get_pid")) == 3
    env.set_attr("scale", [1.0, 2.0, 3.0])
    assert env.get_attr("scale") == (1.0, 2.0, 3.0)
    env.set_attr("scale", 0.5)
    assert env.get_attr("scale") == (0.5,) * 3
    frames = env.render()
    assert len(frames) == 3 and frames[0].shape == (2, 2, 3)
    assert env.np_random_seed == (0, 1, 2)
    with pytest.raises(ValueError, match="expected 3 values"):
        env.set_attr("scale", [1.0])
    env.set_attr("scale", 1.0)


def test_calls_while_actors_are_in_flight_keep_their_results(async_cartpoles):
    env = async_cartpoles
    env.async_reset()
    env.recv()
    assert len(env.get_attr("spec")) == 4  # the other actor's reset is in flight
    assert len(env.recv()[-1]["env_id"]) == 2


def test_state_errors_are_gymnasiums():
    env = make([cartpole] * 2)
    env.reset()
    with pytest.raises(NoAsyncCallError):
        env.step_wait()
    env.step_async(np.zeros(2, np.int64))
    with pytest.raises(AlreadyPendingCallError):
        env.reset_async()
    env.step_wait()
    env.close()
    with pytest.raises(ClosedEnvironmentError):
        env.step(np.zeros(2, np.int64))
    env.close()  # idempotent


def test_bad_actions_raise_and_change_nothing(info_envs):
    env = info_envs
    ref = gym.vector.SyncVectorEnv([info_env] * 3)
    assert_tree_equal(env.reset(seed=1), ref.reset(seed=1))
    with pytest.raises(ValueError, match=r"action\[1\]: expected shape"):
        env.step((np.zeros(3, np.int64), np.zeros((3, 5), np.float32)))
    ref.action_space.seed(0)
    for _ in range(5):
        actions = ref.action_space.sample()
        assert_tree_equal(env.step(actions), ref.step(actions))
    ref.close()


def test_wait_timeout_keeps_the_call_pending():
    with make(faulty("", 0, delay=0.5)) as env:
        env.reset()
        env.step_async(np.zeros(4, np.int64))
        with pytest.raises(EnvTimeoutError, match="no answer within") as info:
            env.step_wait(timeout=0.05)
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, multiprocessing.TimeoutError)
        obs, *_ = env.step_wait(timeout=PROMPT_SECONDS)
        np.testing.assert_array_equal(obs[:, 1], [1, 1, 1, 1])


def test_env_exception_keeps_type_traceback_env_id_and_env_usable():
    with make(faulty("raise", 3, at_step=2)) as env:
        env.reset()
        env.step(np.zeros(4, np.int64))
        with pytest.raises(ValueError, match="injected failure") as info:
            env.step(np.zeros(4, np.int64))
        assert "in inject" in str(info.value.__cause__)  # the worker's traceback
        assert info.value.__cause__.env_id == 3
        assert any("env 3" in note for note in info.value.__notes__)
        assert any("Ray actor 1" in note for note in info.value.__notes__)
        obs, _ = env.reset()
        obs, *_ = env.step(np.ones(4, np.int64))
        np.testing.assert_array_equal(obs[:, 0], [0, 1, 2, 3])


def test_env_exception_in_async_mode_keeps_the_other_actors_results():
    with make(faulty("raise", 0, n=4), batch_size=2) as env:
        env.async_reset()
        ids = [env.recv()[-1]["env_id"].tolist() for _ in range(2)]
        for chunk in ids:
            env.send(np.zeros(2, np.int64), chunk)
        received = []
        with pytest.raises(ValueError, match="injected failure"):
            for _ in range(2):
                received += env.recv(timeout=PROMPT_SECONDS)[-1]["env_id"].tolist()
        if not received:  # the failed actor finished first: the other one is kept
            received = env.recv(timeout=PROMPT_SECONDS)[-1]["env_id"].tolist()
        assert received == [2, 3]
        env.send(np.zeros(2, np.int64), [0, 1])  # the failed actor's envs are usable
        assert env.recv(timeout=PROMPT_SECONDS)[-1]["env_id"].tolist() == [0, 1]


def test_dead_env_worker_raises_worker_died_error_with_the_global_env_id():
    env = make(faulty("sigkill", 2))
    try:
        env.reset()
        with pytest.raises(WorkerDiedError, match="env 2 .*SIGKILL") as info:
            env.step(np.zeros(4, np.int64))
        assert info.value.env_id == 2
        with pytest.raises(WorkerDiedError):
            env.step(np.zeros(4, np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("batch_size", [None, 2], ids=["sync", "async"])
def test_killed_actor_raises_actor_died_error_naming_its_envs(ray_local, batch_size):
    env = make([cartpole] * 4, batch_size=batch_size)
    pids = pids_of(env)
    try:
        env.reset()
        kill_actor(ray_local, env.actor_handles()[1])
        begin = time.monotonic()
        with pytest.raises(ActorDiedError, match=r"actor 1 .*envs \[2, 3\]") as info:
            for _ in range(4):  # async: until actor 1's turn comes
                env.step(np.zeros(batch_size or 4, np.int64))
        assert time.monotonic() - begin < PROMPT_SECONDS
        assert isinstance(info.value, WorkerDiedError) and info.value.env_ids == [2, 3]
        with pytest.raises(ActorDiedError):
            env.reset()
    finally:
        env.close()  # does not raise
    assert_gone(pids)


def test_restart_policy_recreates_the_actor_and_reports_it(ray_local):
    env = make([cartpole] * 4, restart_policy=RestartPolicy(max_restarts=1))
    pids = pids_of(env)
    try:
        env.reset(seed=0)
        old = env.actor_info()[1]["pid"]
        kill_actor(ray_local, env.actor_handles()[1])
        obs, rewards, terminated, truncated, info = env.step(np.zeros(4, np.int64))
        np.testing.assert_array_equal(info["env_restarted"], [False, False, True, True])
        np.testing.assert_array_equal(info["_env_restarted"], [False, False, True, True])
        np.testing.assert_array_equal(truncated, [False, False, True, True])
        np.testing.assert_array_equal(rewards[2:], [0.0, 0.0])
        assert not terminated.any()
        assert np.abs(obs[2:]).max() <= 0.05  # CartPole's reset state
        assert env.actor_info()[1]["restarts"] == 1 and env.actor_info()[1]["pid"] != old
        pids += pids_of(env)
        for _ in range(5):
            *_, info = env.step(np.ones(4, np.int64))
            assert "env_restarted" not in info
        kill_actor(ray_local, env.actor_handles()[1])  # max_restarts=1 is used up
        with pytest.raises(ActorDiedError, match="envs \\[2, 3\\]"):
            env.step(np.zeros(4, np.int64))
    finally:
        env.close()
    assert_gone(pids)


def test_a_restart_that_cannot_be_placed_names_the_dead_actors_envs(ray_local):
    # The recreated actor asks for more CPUs than the instance has: its start times out.
    policy = RestartPolicy(max_restarts=1, start_timeout=2.0, actor_options={"num_cpus": 64})
    env = make([cartpole] * 4, restart_policy=policy)
    pids = pids_of(env)
    try:
        env.reset(seed=0)
        kill_actor(ray_local, env.actor_handles()[1])
        with pytest.raises(ActorDiedError, match=r"actor 1 .*envs \[2, 3\]") as info:
            env.step(np.zeros(4, np.int64))
        cause = info.value.__cause__
        assert isinstance(cause, EnvTimeoutError), repr(cause)
        assert "Ray actors [1] (envs [2, 3]) did not restart within 2 s" in str(cause)
        assert "'num_cpus': 64" in str(cause)
    finally:
        env.close()
    assert_gone(pids)


def test_restart_during_a_call_reports_at_the_next_step(ray_local):
    with make([cartpole] * 4, batch_size=2,
              restart_policy=RestartPolicy(max_restarts=2)) as env:
        env.reset()
        kill_actor(ray_local, env.actor_handles()[0])
        assert len(env.get_attr("spec")) == 4  # the call is run again on the new actor
        seen = {}
        for _ in range(4):
            *_, info = env.step(np.zeros(2, np.int64))
            for i, flag in zip(info["env_id"], info.get("env_restarted", [False] * 2)):
                seen[int(i)] = seen.get(int(i), False) or bool(flag)
        assert seen.get(0) and seen.get(1) and not seen.get(2, False)


@pytest.mark.parametrize("close_kwargs", [{"terminate": True}, {"timeout": 0.5}],
                         ids=["terminate", "polite-with-timeout"])
def test_close_is_bounded_with_a_hung_env(close_kwargs):
    env = make(faulty("hang", 3))
    pids = pids_of(env)
    env.reset()
    env.step_async(np.zeros(4, np.int64))
    begin = time.monotonic()
    env.close(**close_kwargs)
    assert time.monotonic() - begin < PROMPT_SECONDS
    assert_gone(pids)


def test_constructor_errors_are_raised_and_leave_no_actor():
    def broken():
        raise KeyError("no such env")
    with pytest.raises(KeyError, match="no such env"):
        make([cartpole, broken, cartpole])


def test_import_alf_env_without_ray():
    code = ("import sys; sys.modules['ray'] = None\n"
            "import alf_env, alf_env.vector, alf_env.distributed\n"
            "from alf_env.distributed import RayVectorEnv\n"
            "try:\n"
            "    RayVectorEnv([lambda: None], num_actors=1)\n"
            "except ImportError as e:\n"
            "    assert 'alf_env[ray]' in str(e), e\n"
            "else:\n"
            "    raise SystemExit('no ImportError')\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=120)


def test_close_after_ray_shutdown_returns():
    """A script that shuts Ray down before closing the env (its own Ray instance)."""
    code = ("import ray, gymnasium as gym\n"
            "from alf_env.distributed import RayVectorEnv\n"
            "ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
            "env = RayVectorEnv([lambda: gym.make('CartPole-v1')] * 2, num_actors=2,\n"
            "                   actor_options={'num_cpus': 0})\n"
            "env.reset()\n"
            "ray.shutdown()\n"
            "env.close()\n"
            "assert env.closed\n"
            "assert not ray.is_initialized(), 'close() started a new local Ray'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=300)
