"""The worker's side of the pipe path (alf_env.control_plane.worker): in this
process, a packed step of a plain AlfGymWrapper takes its flat step and
answers the same record as a step that builds the TimeStep; in workers, a
request that does not unpickle fails alone."""

import functools

import numpy as np
import pytest

from alf_env.control_plane.leaf_codec import StepCodecs
from alf_env.control_plane.worker import WorkerEnvProxy, flat_stepper_of
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.vector import FastVectorEnv
from tests.support.gym_envs import NumericInfoEnv
from tests.support.probe_envs import OnlyHere, ProbeEnv


class _Subclass(AlfGymWrapper):
    """Converts as its base class, but is a subclass: no flat step."""


def _env(cls, pattern):
    env = NumericInfoEnv(pattern, episode_length=5)
    env.reset(seed=0)  # the probe's reset is unseeded: seed it the same in both runs
    return cls(env, discount=0.9)


@pytest.mark.parametrize("pattern", ["fixed", "come_go"])
def test_packed_steps_of_the_flat_step_equal_those_of_step(pattern, monkeypatch):
    built = []
    original_step = AlfGymWrapper._step

    def counting_step(self, action):
        built.append(type(self))
        return original_step(self, action)

    monkeypatch.setattr(AlfGymWrapper, "_step", counting_step)
    plain, subclass = _env(AlfGymWrapper, pattern), _env(_Subclass, pattern)
    assert flat_stepper_of(plain) is not None and flat_stepper_of(subclass) is None
    proxies = [WorkerEnvProxy(env, flatten=True) for env in (plain, subclass)]
    codecs = StepCodecs(plain.action_spec(), plain.time_step_spec())
    for env in (plain, subclass):
        env.seed(4)
    assert proxies[0].reset_packed() == proxies[1].reset_packed()
    rng = np.random.RandomState(0)
    ends = 0
    for _ in range(40):
        record = codecs.pack_action(rng.uniform(-1, 1, 2).astype(np.float32))
        answers = [proxy.step_packed(record) for proxy in proxies]
        assert answers[0] == answers[1]
        ends += int(codecs.unpack_time_step(answers[0]).is_last())
    assert ends >= 6
    # The plain env built a TimeStep only for the steps that reset it.
    assert built.count(AlfGymWrapper) in (ends - 1, ends)  # (none after a final LAST)
    assert built.count(_Subclass) == 40


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


def test_a_request_that_does_not_unpickle_in_a_native_loop_fails_alone():
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
