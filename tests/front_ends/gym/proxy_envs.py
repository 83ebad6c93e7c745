"""Small gymnasium envs for the GymProxy tests (importable by spawn and forkserver workers).

Each is deterministic given its reset seed, so a proxy and the same env in
this process must return the same values, of the same types.
"""

import faulthandler
import os
import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.support.probe_envs import inject

REWARD_TYPES = {"float": float, "float64": np.float64, "float32": np.float32}


class MixedInfoEnv(gym.Env):
    """A Box observation and infos of every kind: Python int/float/bool, numpy
    scalars, arrays, strings, nested dicts, and keys that appear only late in
    the episode. ``reward_type`` is the reward's type ("float", "float64", "float32")."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, reward_type: str = "float", episode_length: int = 12) -> None:
        self.observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.render_mode = "rgb_array"
        self.level = 1  # an attribute the tests read and set
        self._reward_type = REWARD_TYPES[reward_type]
        self._length = episode_length
        self._t = 0
        self._pos = np.zeros(3, np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        self._pos = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        info: dict = {"start": float(self._pos[0])}
        if options:
            info["options"] = dict(options)
        return self._pos.copy(), info

    def step(self, action):
        self._t += 1
        self._pos[int(action)] += 0.25 * self.level
        reward = self._reward_type(self._pos.sum())
        info: dict = {"t": self._t, "ratio": self._t / 7, "even": self._t % 2 == 0,
                      "np_int": np.int16(self._t), "np_float": np.float32(self._t / 3),
                      "np_bool": np.bool_(self._t % 3 == 0), "vec": self._pos.copy(),
                      "nested": {"kind": int(action), "deep": {"name": f"s{self._t}"}}}
        if self._t > 5:
            info["late"] = np.arange(self._t, dtype=np.int64)
        if self._t % 4 == 0:
            info = {}
        terminated = bool(self.np_random.random() < 0.05)
        truncated = self._t >= self._length
        return self._pos.copy(), reward, terminated, truncated, info

    def render(self):
        return np.full((4, 5, 3), self._t, np.uint8)

    def scaled(self, x: float, factor: float = 2.0) -> float:
        """A method with arguments, for the forwarding tests."""
        return x * factor * self.level

    def pid(self) -> int:
        return os.getpid()


class FrameEnv(gym.Env):
    """A 480x640x3 uint8 camera frame per step, a function of the seed and the step."""

    HEIGHT, WIDTH = 480, 640

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (self.HEIGHT, self.WIDTH, 3), np.uint8)
        self.action_space = spaces.Discrete(2)
        self._t = 0
        self._base = np.zeros((self.HEIGHT, self.WIDTH, 3), np.uint8)

    def _frame(self) -> np.ndarray:
        frame = self._base.copy()
        frame[self._t % self.HEIGHT, :, :] = 255
        frame[:, :, self._t % 3] += np.uint8(self._t)
        return frame

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        self._base = self.np_random.integers(0, 200, self._base.shape, dtype=np.uint8)
        return self._frame(), {"frame": 0}

    def step(self, action):
        self._t += 1
        return self._frame(), float(action), False, self._t >= 20, {"frame": self._t}


class OffSpaceEnv(gym.Env):
    """Observations the shared row cannot take, so they travel on the pipe:
    ``kind`` "float64" (a Box float32 space, float64 arrays), "fortran" (the
    right dtype and shape, Fortran order), "dict" (a Dict space) or "text"."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.action_space = spaces.Discrete(2)
        if kind in ("float64", "fortran"):
            self.observation_space = spaces.Box(-1.0, 1.0, (2, 3), np.float32)
        elif kind == "dict":
            self.observation_space = spaces.Dict({
                "img": spaces.Box(0, 255, (4, 4), np.uint8), "n": spaces.Discrete(5)})
        else:
            self.observation_space = spaces.Text(12)
        self._t = 0

    def _obs(self) -> Any:
        if self.kind == "float64":
            return np.full((2, 3), self._t / 10, np.float64)
        if self.kind == "fortran":
            return np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3) + self._t)
        if self.kind == "dict":
            return {"img": np.full((4, 4), self._t, np.uint8), "n": self._t % 5}
        return f"text {self._t}"

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        return self._obs(), 0.5, False, self._t >= 5, {}


class RaisingEnv(gym.Env):
    """Raises ``KeyError`` in its ``at_step``-th step."""

    def __init__(self, at_step: int = 2) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._at = at_step
        self._t = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._t += 1
        if self._t == self._at:
            raise KeyError(f"the sensor went away at step {self._t}")
        return np.zeros(2, np.float32), 0.0, False, False, {}


class DyingEnv(gym.Env):
    """Ends its own process (``inject(fault)``: "sigkill", "segv", "exit") in its
    ``at_step``-th step since its last reset, or in ``reset`` (``at_step=0``).

    With ``marker``, it dies once: it creates the file right before dying and,
    built again, never dies while the file exists (and takes ``rebuild_delay``
    seconds to build, its observation space of size ``rebuilt_size``). Without,
    it dies every time. Its observation is ``[pid, step]``.
    """

    def __init__(self, fault: str = "sigkill", at_step: int = 3, marker: str = "",
                 rebuild_delay: float = 0.0, rebuilt_size: int = 2) -> None:
        size = 2
        if marker and os.path.exists(marker):
            time.sleep(rebuild_delay)
            size = rebuilt_size
        self.observation_space = spaces.Box(0, np.inf, (size,), np.float64)
        self.action_space = spaces.Discrete(2)
        self._fault = fault
        self._at = at_step
        self._marker = marker
        self._t = 0

    def _maybe_die(self) -> None:
        if self._marker:
            if os.path.exists(self._marker):
                return
            with open(self._marker, "w"):
                pass
        faulthandler.disable()  # a crash on purpose: no "Fatal Python error" dump
        inject(self._fault)

    def _obs(self) -> np.ndarray:
        return np.array([os.getpid(), self._t], np.float64)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._t = 0
        if self._at == 0:
            self._maybe_die()
        return self._obs(), {"seed": seed}

    def step(self, action):
        self._t += 1
        if self._t == self._at:
            self._maybe_die()
        return self._obs(), 1.0, False, False, {"t": self._t}
