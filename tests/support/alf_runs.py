"""Batched ALF environments stepped for comparison: seeded runs, an in-process
reference of the slot/spare policy, and value-for-value assertions.

Shared by the contract suite of the ALF front ends (tests/front_ends/alf) and
the Ray front end's tests.
"""

import collections

import numpy as np
import torch

from alf_env import nest
from alf_env.bench.synthetic_envs import ImageEnv, TrivialEnv
from alf_env.data_structures import StepType
from alf_env.environments import suite_gym
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.random_alf_environment import RandomAlfEnvironment
from alf_env.tensor_specs import BoundedTensorSpec
from tests.support.alf_envs import NUM_ACTIONS


def random_actions(num_steps, batch_size, seed=0):
    rng = np.random.RandomState(seed)
    return [torch.as_tensor(rng.randint(0, NUM_ACTIONS, batch_size)) for _ in range(num_steps)]


class InProcessReference:
    """Steps the same envs in this process with the documented slot/spare policy."""

    def __init__(self, envs, num_spares=0):
        self.envs = envs
        self.num_slots = len(envs) - num_spares
        self.slot_env = list(range(self.num_slots))
        self.spares = collections.deque(range(self.num_slots, len(envs)))
        self.spare_first = {}
        self.fresh = {}

    def reset(self):
        outputs = [self.envs[i].reset() for i in self.slot_env]
        self.spare_first = {i: self.envs[i].reset() for i in self.spares}
        self.fresh = {}
        return self._finish(outputs)

    def step(self, action):
        outputs = []
        for slot, i in enumerate(self.slot_env):
            if slot in self.fresh:
                outputs.append(self.fresh.pop(slot))
            else:
                outputs.append(self.envs[i].step(action[slot].numpy()))
        return self._finish(outputs)

    def _finish(self, outputs):
        if self.spares:
            for slot, ts in enumerate(outputs):
                if ts.step_type == StepType.LAST:
                    old = self.slot_env[slot]
                    new = self.spares.popleft()
                    self.spares.append(old)
                    self.slot_env[slot] = new
                    self.fresh[slot] = self.spare_first.pop(new)
                    self.spare_first[old] = self.envs[old].reset()
        return outputs


def assert_rows_equal(batched, rows):
    """Compares a batched torch TimeStep with per-row numpy TimeSteps."""
    for r, ts in enumerate(rows):
        assert int(batched.step_type[r]) == int(ts.step_type)
        assert float(batched.reward[r]) == float(ts.reward)
        assert float(batched.discount[r]) == float(ts.discount)
        np.testing.assert_array_equal(batched.observation[r].numpy(), ts.observation)
        assert int(batched.prev_action[r]) == int(ts.prev_action)
    np.testing.assert_array_equal(batched.env_id.numpy(), np.arange(len(rows)))


def random_env(env_id, batch_size=None):
    obs_spec = {"pos": BoundedTensorSpec((3,), torch.float32, -1, 1),
                "frame": BoundedTensorSpec((2, 2), torch.uint8, 0, 255)}
    action_spec = (BoundedTensorSpec((), torch.int64, 0, 3),
                   BoundedTensorSpec((2,), torch.float32, -1, 1))
    return RandomAlfEnvironment(obs_spec, action_spec, env_id=env_id,
                                episode_end_probability=0.1, batch_size=batch_size,
                                seed=100 + env_id)


def trivial_env(env_id):
    return AlfGymWrapper(TrivialEnv(env_id=env_id), env_id=env_id)


def image_env(env_id):
    return AlfGymWrapper(ImageEnv(env_id=env_id), env_id=env_id)


def cartpole(env_id):
    return suite_gym.load("CartPole-v1", env_id=env_id)


def run(cls, ctors, steps, seed=0, **kwargs):
    """Steps a batched env with seeded random actions; returns every time step."""
    out = []
    with cls(ctors, **kwargs) as env:
        env.seed([7 * i + 1 for i in range(len(ctors))])
        torch.manual_seed(seed)
        out.append(env.reset())
        for _ in range(steps):
            action = env.action_spec()
            action = type(action)(s.sample((env.batch_size,)) for s in action) \
                if isinstance(action, tuple) else action.sample((env.batch_size,))
            out.append(env.step(action))
    return out


def assert_same_sequences(a, b):
    assert len(a) == len(b)
    for t, (x, y) in enumerate(zip(a, b)):
        for path, (u, v) in zip(*(_paths(x), zip(_leaves(x), _leaves(y)))):
            assert u.dtype == v.dtype, (t, path)
            assert torch.equal(u, v), (t, path, u, v)


def _leaves(ts):
    return nest.flatten(ts)


def _paths(ts):
    return [p for p, _ in nest.flatten_with_path(ts)]
