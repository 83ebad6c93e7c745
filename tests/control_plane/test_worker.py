"""The worker's side of the pipe path (alf_env.control_plane.worker): a
request that does not unpickle fails alone."""

import functools

import pytest

from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.vector import FastVectorEnv
from tests.support.gym_envs import NumericInfoEnv
from tests.support.probe_envs import OnlyHere, ProbeEnv


def _raises_unreadable_request():
    return pytest.raises(AttributeError, match="OnlyHere: made in process")


def test_a_request_that_does_not_unpickle_in_the_worker_fails_alone():
    # E.g. an argument whose class only the trainer can import: that request
    # raises (the worker's traceback in its cause); the worker serves on.
    with ProcessEnvironment(ProbeEnv) as env:
        env.start()
        with _raises_unreadable_request() as info:
            env.call("add", OnlyHere(), 1)()
        assert "unpickling a request in the worker" in str(info.value.__cause__)
        assert env.call("add", 1, 2)() == 3


def test_a_request_that_does_not_unpickle_in_a_job_loop_fails_alone():
    # The same request to workers serving the shared-memory loop (a CALL job).
    env = FastVectorEnv([functools.partial(NumericInfoEnv, "fixed")] * 2)
    try:
        env.reset(seed=0)
        with _raises_unreadable_request():
            env.call("set_wrapper_attr", "probe", OnlyHere())
        env.step(env.action_space.sample())
        env.call("set_wrapper_attr", "probe", 5)
        assert env.get_attr("probe") == (5, 5)
    finally:
        env.close()
