"""Small gymnasium envs for the FastVectorEnv tests, and how to compare results.

Every env is deterministic given its reset seed, so a FastVectorEnv and a
gymnasium ``SyncVectorEnv`` built from the same constructors must return the
same values.
"""

import copy
import os
import sys
import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.support.probe_envs import inject


class InfoEnv(gym.Env):
    """Dict/Tuple observations, a Tuple action and infos of many kinds.

    Infos are empty on some steps and hold ints, floats, numpy scalars and
    arrays, strings, bools and nested dicts on others; episodes end by
    termination (random) or truncation (length drawn at reset).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, env_id: int = 0) -> None:
        self.env_id = env_id
        self.observation_space = spaces.Dict({
            "pos": spaces.Box(-10.0, 10.0, (3,), np.float32),
            "count": spaces.Discrete(1000),
            "pair": spaces.Tuple((spaces.MultiBinary(4), spaces.MultiDiscrete([3, 5]))),
        })
        self.action_space = spaces.Tuple((spaces.Discrete(3),
                                          spaces.Box(-1.0, 1.0, (2,), np.float32)))
        self.render_mode = "rgb_array"
        self.scale = 1.0  # set_attr target
        self._t = 0
        self._length = 0
        self._pos = np.zeros(3, np.float32)

    def _obs(self) -> dict:
        rng = self.np_random
        return {"pos": self._pos.copy(), "count": self._t,
                "pair": (rng.integers(0, 2, 4).astype(np.int8),
                         np.array([self._t % 3, self._t % 5], np.int64))}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        self._length = int(self.np_random.integers(5, 25))
        self._pos = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        info = {"start": self._length, "nested": {"x": float(self._pos[0])}}
        if options:
            info["options"] = dict(options)
        return self._obs(), info

    def step(self, action):
        kind, push = action
        self._t += 1
        self._pos[:2] += push * self.scale
        self._pos[2] += float(kind)
        reward = float(self._pos.sum())
        terminated = bool(self.np_random.random() < 0.04)
        truncated = self._t >= self._length
        if self._t % 3 == 0:
            info = {}
        else:
            info = {"t": self._t, "speed": np.float32(push[0]), "vec": self._pos[:2].copy(),
                    "nested": {"kind": int(kind), "deep": {"flag": bool(self._t % 2)}}}
            if self._t % 4 == 1:
                info["note"] = f"step {self._t}"
        return self._obs(), reward, terminated, truncated, info

    def render(self):
        return np.full((2, 2, 3), self._t, np.uint8)

    def get_pid(self) -> int:
        return os.getpid()


def info_env(env_id: int = 0) -> InfoEnv:
    return InfoEnv(env_id)


class SpaceEnv(gym.Env):
    """Observations sampled from any observation space; echoes its action in the info.

    The spaces are seeded by ``reset(seed=...)``, so the observations are a
    deterministic function of the seed for every kind of space, including
    Graph and Sequence (which have no fixed size).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 episode_length: int = 7) -> None:
        # Own copies: envs in one process (SyncVectorEnv) must not share RNGs.
        self.observation_space = copy.deepcopy(observation_space)
        self.action_space = copy.deepcopy(action_space)
        self.episode_length = episode_length
        self._t = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self._t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self._t += 1
        assert self.action_space.contains(action), (action, self.action_space)
        return (self.observation_space.sample(), 1.0, False,
                self._t >= self.episode_length, {"action": action})


class FaultyEnv(gym.Env):
    """A small env that fails as told (``tests.support.probe_envs.inject``) at a given step.

    Args:
        fault: "raise", "raise_unpicklable", "exit", "sigkill", "segv", "hang" or ""
            (never fails).
        at_step: the step (counted from 1 over the env's life) that fails.
        delay: seconds every step sleeps.
    """

    def __init__(self, fault: str = "", at_step: int = 1, delay: float = 0.0,
                 env_id: int = 0) -> None:
        self.fault = fault
        self.at_step = at_step
        self.delay = delay
        self.env_id = env_id
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._steps = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        return np.array([self.env_id, 0], np.float32), {}

    def step(self, action):
        self._steps += 1
        if self.delay:
            time.sleep(self.delay)
        if self.fault and self._steps == self.at_step:
            inject(self.fault)
        obs = np.array([self.env_id, self._steps], np.float32)
        return obs, float(action), False, False, {}


class JitterEnv(gym.Wrapper):
    """Sleeps a random time per step (own RNG, so observations are unaffected)."""

    def __init__(self, env: gym.Env, max_delay: float, seed: int) -> None:
        super().__init__(env)
        self._max_delay = max_delay
        self._rng = np.random.default_rng(seed)

    def step(self, action):
        time.sleep(self._rng.uniform(0, self._max_delay))
        return self.env.step(action)


class ModulesEnv(gym.Env):
    """A trivial env that can say which modules its worker process has imported."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any):
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def imported(self, module: str) -> bool:
        """Whether ``module`` is in this process's ``sys.modules``."""
        return module in sys.modules


def assert_tree_equal(a: Any, b: Any, path: str = "") -> None:
    """Asserts that two results (nests of dicts, tuples, arrays, objects) are equal.

    Arrays must agree in dtype and shape; object arrays are compared
    element by element.
    """
    if isinstance(a, dict):
        assert isinstance(b, dict), (path, type(b))
        assert set(a) == set(b), (path, sorted(a), sorted(b))
        for key in a:
            assert_tree_equal(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, gym.spaces.GraphInstance):
        assert isinstance(b, gym.spaces.GraphInstance), (path, type(b))
        for name in a._fields:
            assert_tree_equal(getattr(a, name), getattr(b, name), f"{path}.{name}")
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_tree_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), (path, type(b), b)
        assert a.dtype == b.dtype and a.shape == b.shape, (path, a.dtype, b.dtype,
                                                           a.shape, b.shape)
        if a.dtype == object:
            for i, (x, y) in enumerate(zip(a.ravel(), b.ravel())):
                assert_tree_equal(x, y, f"{path}[{i}]")
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), (path, a, b)
    else:
        assert type(a) is type(b) or (np.isscalar(a) and np.isscalar(b)), (path, a, b)
        assert a == b or (a is None and b is None), (path, a, b)


class NumericInfoEnv(gym.Env):
    """A CartPole-sized env whose infos are what real envs return: numbers.

    ``pattern`` says how its infos evolve:

    * ``"fixed"``: the same 4 numeric keys every step (MuJoCo-like: Python
      float, numpy float64 and float32, Python int), 2 other keys at reset;
    * ``"come_go"``: keys that come and go from step to step (and a numeric
      array some of the time);
    * ``"type_change"``: the same key changes type mid-run (int, float,
      np.int32, bool, str, None, arrays of other dtypes and shapes, a nested
      dict, numpy scalars of other types), and so do the reward, the flags and
      the observation's dtype, in lockstep across envs: episodes never end, so
      the envs stay in step (gymnasium itself cannot batch an int and a str
      under one key in the same step).
    """

    def __init__(self, pattern: str = "fixed", episode_length: int = 23) -> None:
        self.pattern = pattern
        self.episode_length = episode_length
        self.observation_space = spaces.Box(-1e6, 1e6, (4,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._t = 0
        self._n = 0  # steps since construction: the same in every env of a batch
        self._x = np.zeros(4)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        self._x = self.np_random.normal(size=4)
        return self._x.copy(), {"x_position": float(self._x[0]), "episode_seed": int(
            self.np_random.integers(1 << 30))}

    def step(self, action):
        self._t += 1
        self._n += 1
        self._x[:2] += action
        self._x[2:] = self.np_random.normal(size=2)
        reward = float(self._x.sum())
        terminated = bool(self.np_random.random() < 0.03)
        truncated = self._t >= self.episode_length
        obs = self._x.copy()
        if self.pattern == "type_change":
            # The step's other values change type too: a reward of each scalar
            # type, numpy bools, and now and then a float32 observation.
            kinds = (float, int, np.float32, np.float64, np.int64, bool)
            reward = kinds[self._n % len(kinds)](reward)
            terminated = truncated = False if self._n % 2 else np.bool_(False)
            if self._n % 4 == 0:
                obs = obs.astype(np.float32)
        return obs, reward, terminated, truncated, self._info(action)

    def _info(self, action) -> dict:
        t, x = self._t, self._x
        if self.pattern == "fixed":
            return {"x_position": float(x[0]), "x_velocity": np.float64(x[1]),
                    "reward_ctrl": np.float32(-np.square(action).sum()), "frame": t}
        if self.pattern == "come_go":
            info: dict = {"x": float(x[0])}
            if t % 2:
                info["odd"] = t
            if t % 3 == 0:
                info["vec"] = x[:3].astype(np.float32)
            if t % 5 == 0:
                info = {}
            return info
        values = [t, float(x[0]), np.int32(t), bool(t % 2), f"s{t}", None,
                  np.full(2, x[0]), np.full(3, t, np.float32), {"inner": t}, np.int64(-t),
                  -t, np.uint8(t % 256), np.bool_(t % 2), np.float16(t)]
        return {"v": values[(self._n // 3) % len(values)], "t": t}


def numeric_info_env(pattern: str = "fixed") -> NumericInfoEnv:
    return NumericInfoEnv(pattern)
