"""FastParallelEnvironment's ``env_info`` against the contract's rule, for random info
dicts per env and step (tests/support/random_infos.py).

The rule (``alf_env.environments.alf_gym_wrapper``'s module doc, ``docs/migration.rst``):
``env_info`` holds the fixed-size numeric entries of the probe's infos (a reset
and one step when the wrapper is made), keys sorted, each cast to its spec's
dtype; an entry missing from an info (or ``None``) is zeros, other entries are
ignored. The expected values are computed here from the raw gymnasium infos of
the same envs stepped in this process, and the episodes end as ALF's do: the
step after ``LAST`` is a reset, whose info the ``FIRST`` time step reports.
Some envs reuse their info dict and clear it in ``reset()``: the ``LAST`` time
step still reports the episode's values.
"""

import copy
import functools
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from tests.support.random_infos import RandomInfoEnv

NUM_ENVS = 4
STEPS = 300


class Recorder(gym.Wrapper):
    """Keeps a copy of every info the env returns, when it returns it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.infos: List[Dict[Any, Any]] = []

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self.infos.append(copy.deepcopy(info))
        return obs, info

    def step(self, action: Any) -> Any:
        *result, info = self.env.step(action)
        self.infos.append(copy.deepcopy(info))
        return (*result, info)


def alf_env(env_id: Optional[int] = None, *, record: bool = False) -> AlfGymWrapper:
    """An ALF env of random infos; the odd ones reuse their info dict."""
    gym_env: gym.Env = RandomInfoEnv("alf", reuse=(env_id or 0) % 2 == 1)
    if record:
        gym_env = Recorder(gym_env)
    return AlfGymWrapper(gym_env, env_id=env_id)


def numeric_entries(info: Dict[Any, Any]) -> Dict[Any, np.ndarray]:
    """The entries of ``info`` that are fixed-size numeric arrays (the probe's rule)."""
    out = {}
    for key, value in info.items():
        try:
            array = np.asarray(value)
        except (TypeError, ValueError):
            continue
        if array.dtype.kind in "biufc":
            out[key] = array
    return out


def expected_env_info(spec: Dict[str, Any], info: Dict[Any, Any]) -> Dict[str, np.ndarray]:
    """What the rule says a time step's ``env_info`` holds for the raw ``info``."""
    out = {}
    for key in sorted(spec):
        dtype = spec[key].numpy_dtype
        value = info.get(key)
        out[key] = (np.zeros(tuple(spec[key].shape), dtype) if value is None
                    else np.asarray(value).astype(dtype))
    return out


def test_env_info_follows_the_contract_for_random_infos():
    ctors = [functools.partial(alf_env, i) for i in range(NUM_ENVS)]
    mirrors = [alf_env(i, record=True) for i in range(NUM_ENVS)]  # in this process
    recorders = [m.gym_env for m in mirrors]
    env = FastParallelEnvironment(ctors, num_workers=2)
    seen_missing = seen_cast = lasts = 0
    try:
        spec = env.env_info_spec()
        # The spec: the probe's (a reset, then a step) numeric entries.
        probe = {**numeric_entries(recorders[0].infos[0]),
                 **numeric_entries(recorders[0].infos[1])}
        assert sorted(spec) == sorted(probe)
        for key, array in probe.items():
            assert tuple(spec[key].shape) == array.shape, key
        seeds = [5 * i + 3 for i in range(NUM_ENVS)]
        env.seed(seeds)
        for mirror, seed in zip(mirrors, seeds):
            mirror.seed(seed)
        rng = np.random.default_rng(4)
        time_step = env.reset()
        for mirror in mirrors:
            mirror.reset()
        for t in range(STEPS + 1):
            assert sorted(time_step.env_info) == sorted(spec)
            for i, recorder in enumerate(recorders):
                raw = recorder.infos[-1]
                expected = expected_env_info(spec, raw)
                for key, value in expected.items():
                    got = time_step.env_info[key][i]
                    assert got.numpy().dtype == value.dtype, (t, i, key)
                    assert torch.equal(got, torch.as_tensor(value)), (t, i, key, got, value)
                    seen_missing += raw.get(key) is None
                    seen_cast += raw.get(key) is not None and (
                        np.asarray(raw[key]).dtype != value.dtype)
                lasts += bool(time_step.is_last()[i])
            if t == STEPS:
                break
            actions = rng.integers(0, 3, NUM_ENVS)
            time_step = env.step(torch.as_tensor(actions))
            for mirror, action in zip(mirrors, actions):
                mirror.step(np.int64(action))
    finally:
        env.close()
        for mirror in mirrors:
            mirror.close()
    assert seen_missing > 50 and seen_cast > 50 and lasts > 20, (seen_missing, seen_cast, lasts)
