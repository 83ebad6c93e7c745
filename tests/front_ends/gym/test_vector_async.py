"""FastVectorEnv's asynchronous (EnvPool) mode: async_reset / send / recv, and
reset / step with batch_size < num_envs."""

import functools
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from alf_env.errors import EnvTimeoutError, WorkerDiedError
from alf_env.vector import FastVectorEnv
from tests.support.gym_envs import FaultyEnv, InfoEnv, JitterEnv, assert_tree_equal
from tests.support.gym_runs import Trajectories, stepped_alone

MAX_DELAY = 0.004  # seconds an env may sleep per step, so completion order varies
PROMPT_SECONDS = 10.0
# A batch size drawn at random (seeded, so a failure reproduces).
RANDOM_BATCH_SIZE = int(np.random.default_rng(7).integers(2, 7))


def jittery_info_env(env_id: int) -> gym.Env:
    return JitterEnv(InfoEnv(env_id), MAX_DELAY, seed=env_id)


@pytest.mark.parametrize("num_envs, batch_size, envs_per_worker",
                         [(5, 1, 1), (6, 4, 2), (7, RANDOM_BATCH_SIZE, 1)])
def test_each_env_sees_what_stepping_it_alone_gives(num_envs, batch_size, envs_per_worker):
    seed, rounds = 100, 60
    fns = [functools.partial(jittery_info_env, i) for i in range(num_envs)]
    with FastVectorEnv(fns, batch_size=batch_size, envs_per_worker=envs_per_worker) as env:
        log = Trajectories(num_envs, env.single_action_space, seed=1000)
        result = env.reset(seed=seed)
        log.record((result[0], np.zeros(batch_size), np.zeros(batch_size, bool),
                    np.zeros(batch_size, bool), result[1]))
        for _ in range(rounds):
            ids = result[-1]["env_id"]
            assert len(ids) == batch_size and len(set(ids.tolist())) == batch_size
            env.send(log.next_actions(ids.tolist()), ids)
            result = env.recv()
            log.record(result)
    for i, fn in enumerate(fns):
        # Results of the last actions sent but never received are not compared.
        actions = log.actions[i][:len(log.results[i]) - 1]
        expected = stepped_alone(fn, seed + i, actions)
        assert len(expected) == len(log.results[i])
        for t, (got, want) in enumerate(zip(log.results[i], expected)):
            assert_tree_equal(got, want, f"env {i} step {t}")


def test_no_env_is_starved_and_recv_returns_the_fastest_first():
    # Env 0 is slow; the others are fast. Every env still gets stepped, and
    # the fast ones are stepped more often.
    fns = [functools.partial(FaultyEnv, delay=0.05 if i == 0 else 0.0, env_id=i)
           for i in range(4)]
    counts = np.zeros(4, int)
    with FastVectorEnv(fns, batch_size=2) as env:
        env.async_reset()
        deadline = time.monotonic() + PROMPT_SECONDS
        while counts[0] < 4 and time.monotonic() < deadline:
            _, _, _, _, info = env.recv()
            ids = info["env_id"]
            counts[ids] += 1
            env.send(np.zeros(len(ids), np.int64), ids)
    assert counts.min() >= 1, counts
    assert counts[1:].min() > counts[0], counts


def test_step_and_reset_in_async_mode():
    fns = [functools.partial(FaultyEnv, env_id=i) for i in range(4)]
    with FastVectorEnv(fns, batch_size=2) as env:
        assert env.observation_space == batch_space(env.single_observation_space, 2)
        assert env.action_space.shape == (2,)
        obs, info = env.reset(seed=0)
        assert obs.shape == (2, 2) and info["env_id"].dtype == np.int32
        np.testing.assert_array_equal(obs[:, 0], info["env_id"])
        seen = set()
        for _ in range(20):
            obs, rewards, terminated, truncated, info = env.step(np.ones(2, np.int64))
            assert obs.shape == (2, 2) and rewards.dtype == np.float64
            np.testing.assert_array_equal(obs[:, 0], info["env_id"])
            seen.update(info["env_id"].tolist())
        assert seen == {0, 1, 2, 3}
        # reset() drops what is in flight and starts over.
        obs, info = env.reset()
        np.testing.assert_array_equal(obs[:, 1], [0, 0])


def test_same_step_autoreset_in_async_mode_puts_final_obs_in_info():
    def short_cartpole():
        return gym.make("CartPole-v1", max_episode_steps=3)

    with FastVectorEnv([short_cartpole] * 3, batch_size=1,
                       autoreset_mode=AutoresetMode.SAME_STEP) as env:
        env.reset(seed=0)
        endings = 0
        for _ in range(30):  # >= 8 episode ends however the steps are spread
            obs, _, terminated, truncated, info = env.step(np.zeros(1, np.int64))
            if terminated[0] or truncated[0]:
                endings += 1
                assert info["_final_obs"][0] and info["final_obs"][0].shape == (4,)
                assert not np.array_equal(info["final_obs"][0], obs[0])
        assert endings >= 3


def test_step_after_recv_refuses_envs_already_sent():
    # step() steps the envs of the last recv() without checking its ids again,
    # but still refuses them once send() has them in flight.
    fns = [functools.partial(FaultyEnv, env_id=i) for i in range(4)]
    with FastVectorEnv(fns, batch_size=2, envs_per_worker=2) as env:
        env.reset(seed=0)
        _, _, _, _, info = env.step(np.zeros(2, np.int64))
        ids = info["env_id"]
        env.send(np.zeros(2, np.int64), ids)
        with pytest.raises(ValueError, match=r"still in flight"):
            env.step(np.zeros(2, np.int64))
        assert len(env.recv()[-1]["env_id"]) == 2  # nothing was lost


def test_send_with_env_ids_names_workers_of_different_sizes():
    fns = [functools.partial(FaultyEnv, env_id=i) for i in range(5)]
    with FastVectorEnv(fns, num_workers=2) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"these 5 envs are spread 3/2 over 2 workers"):
            env.send(np.zeros(2, np.int64), [3, 4])
        assert env.step(np.zeros(5, np.int64))[0].shape[0] == 5  # still usable


def test_send_and_recv_check_their_arguments():
    fns = [functools.partial(FaultyEnv, env_id=i) for i in range(6)]
    with FastVectorEnv(fns, batch_size=2, envs_per_worker=2) as env:
        with pytest.raises(NoAsyncCallError, match="in flight"):
            env.recv()
        env.async_reset()
        with pytest.raises(ValueError, match=r"envs \[0\] are still in flight"):
            env.send(np.zeros(2, np.int64), [0, 1])
        ids = env.recv()[-1]["env_id"]
        assert len(ids) == 2 and ids[0] // 2 == ids[1] // 2  # one worker's envs
        with pytest.raises(ValueError, match="a worker is stepped whole"):
            env.send(np.zeros(1, np.int64), ids[:1])
        with pytest.raises(ValueError, match=r"ids in \[0, 6\)"):
            env.send(np.zeros(2, np.int64), [6, 7])
        with pytest.raises(ValueError, match="listed once"):
            env.send(np.zeros(2, np.int64), [ids[0], ids[0]])
        with pytest.raises(ValueError, match=r"action: expected shape \(2,\)"):
            env.send(np.zeros(3, np.int64), ids)
        env.send(np.zeros(2, np.int64), ids)
        env.reset_async()
        with pytest.raises(AlreadyPendingCallError):
            env.recv()
        with pytest.raises(AlreadyPendingCallError):
            env.send(np.zeros(2, np.int64), ids)
        obs, info = env.reset_wait()
        assert obs.shape == (2, 2) and len(info["env_id"]) == 2


def test_bad_async_arguments():
    with pytest.raises(ValueError, match="multiple of envs_per_worker=2"):
        FastVectorEnv([FaultyEnv] * 4, batch_size=1, envs_per_worker=2)
    with pytest.raises(ValueError, match="DISABLED"):
        FastVectorEnv([FaultyEnv] * 4, batch_size=2, autoreset_mode=AutoresetMode.DISABLED)


def test_recv_timeout_loses_nothing():
    fns = [functools.partial(FaultyEnv, delay=0.3, env_id=i) for i in range(3)]
    with FastVectorEnv(fns, batch_size=2) as env:
        env.async_reset()
        ids = env.recv()[-1]["env_id"].tolist()
        (left,) = {0, 1, 2} - set(ids)  # reset, not received yet
        env.send(np.zeros(2, np.int64), ids)
        with pytest.raises(EnvTimeoutError):
            env.recv(timeout=0.01)
        begin = time.monotonic()
        _, _, _, _, info = env.recv(timeout=PROMPT_SECONDS)
        assert time.monotonic() - begin < PROMPT_SECONDS
        # The env reset long ago comes out, with one of the stepped ones.
        assert left in info["env_id"].tolist()


def test_calls_while_envs_are_in_flight_keep_their_results():
    fns = [functools.partial(FaultyEnv, delay=0.05, env_id=i) for i in range(4)]
    with FastVectorEnv(fns, batch_size=2) as env:
        env.async_reset()
        ids = env.recv()[-1]["env_id"]
        env.send(np.ones(2, np.int64), ids)
        assert env.get_attr("env_id") == (0, 1, 2, 3)  # waits for the jobs in flight
        received = set()
        for _ in range(2):
            received.update(env.recv()[-1]["env_id"].tolist())
        assert received == {0, 1, 2, 3}


def test_worker_exception_in_async_mode_keeps_the_other_envs():
    fns = [functools.partial(FaultyEnv, "raise" if i == 1 else "", at_step=1, env_id=i)
           for i in range(3)]
    with FastVectorEnv(fns, batch_size=1) as env:
        env.async_reset()
        for _ in range(3):
            env.recv()
        env.send(np.zeros(3, np.int64), [0, 1, 2])
        received = []
        with pytest.raises(ValueError, match="injected failure"):
            for _ in range(3):
                received += env.recv()[-1]["env_id"].tolist()
        # The failed env is no longer in flight; the others come out.
        while len(received) < 2:
            received += env.recv()[-1]["env_id"].tolist()
        assert sorted(received) == [0, 2]
        env.async_reset()  # recovers every env
        assert len(env.recv()[-1]["env_id"]) == 1


def test_worker_death_in_async_mode():
    fns = [functools.partial(FaultyEnv, "sigkill" if i == 2 else "", at_step=1, env_id=i)
           for i in range(3)]
    env = FastVectorEnv(fns, batch_size=1)
    try:
        env.async_reset()
        ids = [int(env.recv()[-1]["env_id"][0]) for _ in range(3)]
        for i in ids:
            env.send(np.zeros(1, np.int64), [i])
        with pytest.raises(WorkerDiedError, match="env 2"):
            for _ in range(3):
                env.recv(timeout=PROMPT_SECONDS)
    finally:
        env.close()
