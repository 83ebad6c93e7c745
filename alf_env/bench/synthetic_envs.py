"""The benchmark's synthetic envs: gymnasium envs with fixed, cheap logic, run by every
backend (docs/benchmarks.md, "Workloads"). Observations encode the env id and the step
(``obs[0]``/``obs[1]``), so tests can check that every row came from the right env and step.
"""

import functools
import time
from typing import Any, Callable, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np

# Episode length of every workload env (then truncated); long enough that
# resets are a small part of a benchmark, short enough that tests see them.
EPISODE_LENGTH = 100
W3_STEP_SECONDS = 1e-3


class TrivialEnv(gym.Env):
    """W1: float32[4] observations (``obs[0]`` the env id), a Discrete(2) action, next to no
    work: the transport alone. Episodes are truncated after ``episode_length`` steps."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, env_id: int = 0, episode_length: int = EPISODE_LENGTH) -> None:
        self.env_id = env_id
        self.episode_length = episode_length
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0
        self._obs = np.zeros(4, np.float32)

    def _observe(self) -> np.ndarray:
        self._obs[0] = self.env_id
        self._obs[1] = self._t
        obs: np.ndarray = self._obs.copy()
        return obs

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[np.ndarray, Dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._obs[2:] = self.np_random.random(2)
        return self._observe(), {}

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
        self._t += 1
        self._obs[3] = float(action)
        truncated = self._t >= self.episode_length
        return self._observe(), 1.0, False, truncated, {}

    def render(self) -> np.ndarray:
        return np.zeros((2, 2, 3), np.uint8)


class ImageEnv(TrivialEnv):
    """W2: uint8[84, 84, 4] observations (pixel 0 = env id, pixel 1 = step)."""

    def __init__(self, env_id: int = 0, episode_length: int = EPISODE_LENGTH) -> None:
        super().__init__(env_id, episode_length)
        self.observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
        self._frame = np.zeros((84, 84, 4), np.uint8)

    def _observe(self) -> np.ndarray:
        flat = self._frame.reshape(-1)
        flat[0] = self.env_id % 256
        flat[1] = self._t % 256
        frame: np.ndarray = self._frame.copy()
        return frame


class BusyEnv(TrivialEnv):
    """W3: like W1, but every step burns about ``step_seconds`` of CPU."""

    def __init__(self, env_id: int = 0, episode_length: int = EPISODE_LENGTH,
                 step_seconds: float = W3_STEP_SECONDS) -> None:
        super().__init__(env_id, episode_length)
        self.step_seconds = step_seconds

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
        # The thread's CPU clock: time spent preempted does not count as work done.
        end = time.thread_time() + self.step_seconds
        while time.thread_time() < end:
            pass
        return super().step(action)


W4_STEP_SECONDS = (0.2e-3, 2e-3)


class UnevenEnv(BusyEnv):
    """W4: like W3, but each step burns a random 0.2-2 ms of CPU, from an RNG seeded with the
    env id: the same in every backend, and the observations undisturbed."""

    def __init__(self, env_id: int = 0, episode_length: int = EPISODE_LENGTH,
                 step_seconds: Tuple[float, float] = W4_STEP_SECONDS) -> None:
        super().__init__(env_id, episode_length)
        self._times = np.random.default_rng(env_id)
        self._range = step_seconds

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
        self.step_seconds = float(self._times.uniform(*self._range))
        return super().step(action)


#: Per-step CPU costs of the sweep workloads ``S10`` ... ``S1000``, in µs.
SWEEP_MICROSECONDS = (10, 30, 100, 300, 1000)
#: The keys of :class:`SweepEnv`'s info (HalfCheetah-v5's, as floats).
SWEEP_INFO_KEYS = ("x_position", "x_velocity", "reward_forward", "reward_ctrl")


class SweepEnv(BusyEnv):
    """``S<µs>``: like W3 with another CPU cost, and a 4-key float info every step."""

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[np.ndarray, Dict[str, Any]]:
        obs, _ = super().reset(seed=seed, options=options)
        return obs, self._info()

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, self._info()

    def _info(self) -> Dict[str, float]:
        t = float(self._t)
        return dict(zip(SWEEP_INFO_KEYS, (0.1 * t, 1.0 + t, 0.5 * t, -0.01 * t)))


#: The synthetic envs by workload name; each takes ``env_id`` as a keyword.
SYNTHETIC_ENVS: Dict[str, Callable[..., gym.Env]] = {
    "W1": TrivialEnv, "W2": ImageEnv, "W3": BusyEnv, "W4": UnevenEnv,
    **{f"S{us}": functools.partial(SweepEnv, step_seconds=us * 1e-6)
       for us in SWEEP_MICROSECONDS}}


def make_synthetic_env(name: str, env_id: int = 0) -> gym.Env:
    """Creates the synthetic env of workload ``name``, e.g. ``"W1"`` or ``"S10"`` (any
    workload: ``bench.workloads.make_env``); ``ValueError`` for another name."""
    try:
        make = SYNTHETIC_ENVS[name]
    except KeyError:
        raise ValueError(f"{name!r} is not a synthetic workload; expected one of "
                         f"{', '.join(SYNTHETIC_ENVS)}") from None
    return make(env_id=env_id)
