"""Tests of create_environment."""

import numpy as np
import pytest
import torch

from alf_env.environments.alf_wrappers import BatchEnvironmentWrapper
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.environments.utils import create_environment


def test_parallel_cartpole_with_seed_is_reproducible():
    def rollout():
        env = create_environment("CartPole-v1", num_parallel_environments=2, seed=3,
                                 parallel_environment_ctor=ParallelAlfEnvironment)
        with env:
            assert isinstance(env, ParallelAlfEnvironment)
            obs = [env.reset().observation]
            for _ in range(30):
                obs.append(env.step(torch.ones(2, dtype=torch.int64)).observation)
        return torch.stack(obs)

    first, second = rollout(), rollout()
    assert first.shape == (31, 2, 4)
    assert torch.equal(first, second)
    assert not torch.equal(first[:, 0], first[:, 1])  # envs got different seeds


def test_batch_size_per_env_and_spares():
    env = create_environment("CartPole-v1", num_parallel_environments=2,
                             batch_size_per_env=3,
                             parallel_environment_ctor=ParallelAlfEnvironment)
    with env:
        assert env.batch_size == 6
        ts = env.step(torch.zeros(6, dtype=torch.int64))
        np.testing.assert_array_equal(ts.env_id.numpy(), np.arange(6))
    env = create_environment("CartPole-v1", num_parallel_environments=2, num_spare_envs=1,
                             max_episode_steps=5,
                             parallel_environment_ctor=ParallelAlfEnvironment)
    with env:
        assert env.batch_size == 2 and len(env.worker_pids()) == 3
        env.reset()
        for _ in range(12):
            ts = env.step(torch.zeros(2, dtype=torch.int64))
        assert set(ts.env_id.tolist()) == {0, 1}


def test_nonparallel_runs_in_process():
    env = create_environment("CartPole-v1", num_parallel_environments=3, nonparallel=True,
                             seed=1)
    with env:
        assert isinstance(env, BatchEnvironmentWrapper)
        assert env.batch_size == 3
        ts = env.step(np.zeros(3, dtype=np.int64))
        assert ts.observation.shape == (3, 4)


@pytest.mark.parametrize("kwargs,match", [
    ({"num_parallel_environments": 0}, "num_parallel_environments"),
    ({"batch_size_per_env": 0}, "batch_size_per_env"),
])
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        create_environment("CartPole-v1", **kwargs)
