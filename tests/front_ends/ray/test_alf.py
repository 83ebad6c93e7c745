"""RayParallelAlfEnvironment on a local Ray instance: the ParallelAlfEnvironment
contract (same TimeSteps, env ids, calls) and its faults."""

import functools
import time

import numpy as np
import pytest
import torch

from alf_env.data_structures import StepType
from alf_env.distributed import ActorDiedError, RayParallelAlfEnvironment, RestartPolicy
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.errors import EnvironmentClosedError, EnvTimeoutError
from tests.support.alf_envs import CountingEnv
from tests.support.alf_runs import assert_same_sequences, random_env, run
from tests.support.ray import kill_actor

PROMPT_SECONDS = 20.0
FIT = {"num_cpus": 0}

pytestmark = pytest.mark.usefixtures("ray_local")


def make(ctors, num_actors=2, **kwargs):
    return RayParallelAlfEnvironment(ctors, num_actors=num_actors, actor_options=FIT,
                                     **kwargs)


def test_same_time_steps_as_parallel_alf_environment():
    ctors = [random_env] * 5  # nested specs; shares of 2 and 3 envs
    expected = run(ParallelAlfEnvironment, ctors, 200)
    got = run(RayParallelAlfEnvironment, ctors, 200, num_actors=2, actor_options=FIT)
    assert_same_sequences(got, expected)
    assert sorted(got[-1].env_id.tolist()) == [0, 1, 2, 3, 4]


def test_env_ids_specs_calls_and_render():
    with make([CountingEnv] * 4) as env:
        assert env.batched and env.batch_size == 4
        assert env.action_spec() == CountingEnv().action_spec()
        time_step = env.reset()
        assert time_step.env_id.dtype == torch.int32
        np.testing.assert_array_equal(time_step.env_id, [0, 1, 2, 3])
        np.testing.assert_array_equal(time_step.observation[:, 0], [0, 1, 2, 3])
        for _ in range(20):
            time_step = env.step(torch.ones(4, dtype=torch.int64))
        np.testing.assert_array_equal(time_step.observation[:, 0], [0, 1, 2, 3])
        assert env.render().shape == (2, 2, 3)
        assert env.call_envs_with_same_args("render")[3][0, 0, 0] == 3
        env.seed([1, 2, 3, 4])
        with pytest.raises(ValueError, match="expected 4 seeds"):
            env.seed([1])
        with pytest.raises(ValueError, match="action"):
            env.step(torch.ones(3, dtype=torch.int64))
    with pytest.raises(EnvironmentClosedError):
        env.step(torch.ones(4, dtype=torch.int64))


def test_env_exception_keeps_type_and_env_id():
    ctors = [functools.partial(CountingEnv, fault="raise", fault_phase="step" if i == 2 else "",
                               fault_step=2) for i in range(4)]
    with make(ctors) as env:
        env.reset()
        env.step(torch.zeros(4, dtype=torch.int64))
        with pytest.raises(ValueError, match="injected failure") as info:
            env.step(torch.zeros(4, dtype=torch.int64))
        assert info.value.__cause__.env_id == 2
        assert "in inject" in str(info.value.__cause__)


def test_timeout_raises_and_leaves_only_close():
    ctors = [functools.partial(CountingEnv, step_delay_max=1.0, env_id=i) for i in range(2)]
    env = make(ctors, timeout=0.01)
    try:
        with pytest.raises(EnvTimeoutError, match="no answer within"):
            env.reset()  # or, on a fast machine, one of the steps
            for _ in range(10):
                env.step(torch.zeros(2, dtype=torch.int64))
        with pytest.raises(EnvTimeoutError):
            env.step(torch.zeros(2, dtype=torch.int64))
    finally:
        env.close()


def test_killed_actor_and_the_restart_policy(ray_local):
    env = make([CountingEnv] * 4, restart_policy=RestartPolicy(max_restarts=1))
    try:
        env.reset()
        for _ in range(3):
            env.step(torch.ones(4, dtype=torch.int64))
        kill_actor(ray_local, env.actor_handles()[0])
        time_step = env.step(torch.ones(4, dtype=torch.int64))
        assert time_step.step_type[:2].tolist() == [StepType.FIRST] * 2
        np.testing.assert_array_equal(time_step.env_id, [0, 1, 2, 3])
        assert env.actor_info()[0]["restarts"] == 1
        env.step(torch.ones(4, dtype=torch.int64))
        kill_actor(ray_local, env.actor_handles()[0])
        begin = time.monotonic()
        with pytest.raises(ActorDiedError, match=r"envs \[0, 1\]"):
            env.step(torch.ones(4, dtype=torch.int64))
        assert time.monotonic() - begin < PROMPT_SECONDS
        with pytest.raises(ActorDiedError):
            env.reset()
    finally:
        env.close()
