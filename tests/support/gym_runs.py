"""FastVectorEnv run beside gymnasium's SyncVectorEnv for value-for-value
comparisons, in synchronous and asynchronous (EnvPool) mode."""

import copy

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array

from alf_env.vector import FastVectorEnv
from tests.support.gym_envs import assert_tree_equal


def run_both(env_fns, steps, seed=0, autoreset_mode=AutoresetMode.NEXT_STEP,
             action_seed=1, check=assert_tree_equal, **fast_kwargs):
    """Steps FastVectorEnv and SyncVectorEnv side by side, asserting equal results.

    In DISABLED mode, envs that ended are reset with a reset_mask. Returns the
    number of episode ends seen (so tests can check that autoreset happened).
    ``check(got, expected, path)`` compares each result.
    """
    ref = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)
    env = FastVectorEnv(env_fns, autoreset_mode=autoreset_mode, **fast_kwargs)
    ends = 0
    try:
        check(env.reset(seed=seed), ref.reset(seed=seed), "reset")
        space = ref.action_space
        space.seed(action_seed)
        for t in range(steps):
            if autoreset_mode is AutoresetMode.DISABLED and ref._autoreset_envs.any():
                options = {"reset_mask": ref._autoreset_envs.copy()}
                check(env.reset(options=dict(options)), ref.reset(options=options),
                      f"reset_mask {t}")
            actions = space.sample()
            got, expected = env.step(actions), ref.step(actions)
            check(got, expected, f"step {t}")
            ends += int(np.sum(expected[2] | expected[3]))
    finally:
        env.close()
        ref.close()
    return ends


def row(batched, position):
    """Row ``position`` of a batched observation (dict / tuple / array)."""
    if isinstance(batched, dict):
        return {k: row(v, position) for k, v in batched.items()}
    if isinstance(batched, tuple):
        return tuple(row(v, position) for v in batched)
    return batched[position]


def info_row(infos, position):
    """The info of one env, rebuilt from a batched info with its ``_key`` masks."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_") or key == "env_id":
            continue
        if not infos[f"_{key}"][position]:
            continue
        out[key] = info_row(value, position) if isinstance(value, dict) else value[position]
    return out


class Trajectories:
    """Per env: the actions it was sent and the results it returned."""

    def __init__(self, num_envs, action_space, seed):
        self.results = [[] for _ in range(num_envs)]
        self.actions = [[] for _ in range(num_envs)]
        self._spaces = []
        for i in range(num_envs):
            space = copy.deepcopy(action_space)
            space.seed(seed + i)
            self._spaces.append(space)
        self._single = action_space

    def record(self, result):
        obs, rewards, terminated, truncated, infos = result
        for position, env_id in enumerate(infos["env_id"]):
            self.results[env_id].append((row(obs, position), rewards[position],
                                         terminated[position], truncated[position],
                                         info_row(infos, position)))

    def next_actions(self, env_ids):
        actions = [self._spaces[i].sample() for i in env_ids]
        for i, action in zip(env_ids, actions):
            self.actions[i].append(action)
        return concatenate(self._single, actions,
                           create_empty_array(self._single, len(actions), fn=np.zeros))


def stepped_alone(env_fn, seed, actions):
    """One env in a SyncVectorEnv: the results the async mode must reproduce."""
    results = []
    ref = gym.vector.SyncVectorEnv([env_fn])
    try:
        obs, infos = ref.reset(seed=seed)
        results.append((row(obs, 0), 0.0, False, False, info_row(infos, 0)))
        single = ref.single_action_space
        for action in actions:
            batch = concatenate(single, [action], create_empty_array(single, 1, fn=np.zeros))
            obs, reward, terminated, truncated, infos = ref.step(batch)
            results.append((row(obs, 0), reward[0], terminated[0], truncated[0],
                            info_row(infos, 0)))
    finally:
        ref.close()
    return results
