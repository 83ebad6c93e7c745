"""Micro-benchmark: per-step Python overhead of AlfGymWrapper and of nest.

What it measures
----------------
* ``AlfGymWrapper.step`` on three gymnasium envs, in µs per call, with the
  raw gymnasium ``step`` of the same env alongside so the wrapper's own cost
  (``wrapper - raw``) can be read off:

  - ``TrivialEnv``: float32[4] observation, Discrete(2) action, empty info
    (W1 of ``alf_env.synthetic_envs``);
  - ``DictObsEnv``: a Dict observation (Box float32, Box uint8, Discrete and
    a Tuple of Box + MultiBinary) with a Discrete action and empty info;
  - ``CartPole-v1`` (observations are float32, info empty, truncation at 500).

  Episodes end and auto-reset inside the timed loop, as they do in workers.
* ``nest.flatten`` and ``nest.pack_sequence_as`` on a ``TimeStep`` of the
  Dict-observation env, and ``nest.map_structure`` over two such time steps.

Each number is the best of ``--repeats`` runs of ``--steps`` calls (the best
run is the least disturbed by the machine), reported in µs per call.

Run (from the repository root)::

    PYTHONPATH=. python benchmarks/wrapper_overhead.py
    PYTHONPATH=. python benchmarks/wrapper_overhead.py --steps 5000 --repeats 3
"""

import argparse
import time
from typing import Any, Callable, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np

from alf_env import nest
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.synthetic_envs import TrivialEnv


class DictObsEnv(gym.Env):
    """A cheap env with a Dict observation space (one leaf of each common kind)."""

    def __init__(self, episode_length: int = 100) -> None:
        self.observation_space = gym.spaces.Dict({
            "pos": gym.spaces.Box(-np.inf, np.inf, (3, ), np.float32),
            "img": gym.spaces.Box(0, 255, (8, 8, 1), np.uint8),
            "mode": gym.spaces.Discrete(4),
            "extra": gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (2, ), np.float32),
                                       gym.spaces.MultiBinary(3))),
        })
        self.action_space = gym.spaces.Discrete(2)
        self.episode_length = episode_length
        self._t = 0
        self._obs = {
            "pos": np.zeros(3, np.float32),
            "img": np.zeros((8, 8, 1), np.uint8),
            "mode": 0,
            "extra": (np.zeros(2, np.float32), np.zeros(3, np.int8)),
        }

    def _observe(self) -> Dict[str, Any]:
        obs = dict(self._obs)
        obs["mode"] = self._t % 4
        return obs

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> Tuple[Dict[str, Any], float, bool, bool, dict]:
        self._t += 1
        return self._observe(), 1.0, False, self._t >= self.episode_length, {}


def _best_us(fn: Callable[[], Any], steps: int, repeats: int) -> float:
    """The best over ``repeats`` of the mean µs per call of ``fn``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        best = min(best, (time.perf_counter() - start) / steps * 1e6)
    return best


def _raw_step_fn(gym_env: gym.Env, action: Any) -> Callable[[], Any]:
    """A gymnasium step loop that resets after the end of an episode."""
    gym_env.reset(seed=0)
    done = [False]

    def step() -> Any:
        if done[0]:
            done[0] = False
            return gym_env.reset()
        result = gym_env.step(action)
        done[0] = result[2] or result[3]
        return result

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20000, help="calls per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs; the best is kept")
    args = parser.parse_args()

    cases = [
        ("TrivialEnv", lambda: TrivialEnv(0), np.int64(1), 1),
        ("DictObsEnv", DictObsEnv, np.int64(1), 1),
        ("CartPole-v1", lambda: gym.make("CartPole-v1"), np.int64(1), 1),
    ]
    print(f"{'case':<34}{'µs/call':>10}")
    for name, make, action, raw_action in cases:
        raw_us = _best_us(_raw_step_fn(make(), raw_action), args.steps, args.repeats)
        env = AlfGymWrapper(make())
        env.reset()
        wrapped_us = _best_us(lambda env=env, action=action: env.step(action), args.steps,
                              args.repeats)
        env.close()
        print(f"{'AlfGymWrapper.step ' + name:<34}{wrapped_us:>10.2f}"
              f"   (raw gym step {raw_us:.2f}, overhead {wrapped_us - raw_us:.2f})")

    env = AlfGymWrapper(DictObsEnv())
    time_step = env.reset()
    time_step = env.step(np.int64(1))
    env.close()
    flat = nest.flatten(time_step)
    nest_cases = [
        ("nest.flatten(TimeStep)", lambda: nest.flatten(time_step)),
        ("nest.pack_sequence_as(TimeStep)",
         lambda: nest.pack_sequence_as(time_step, flat)),
        ("nest.map_structure(2 TimeSteps)",
         lambda: nest.map_structure(lambda a, b: a, time_step, time_step)),
        ("nest.flatten(flat leaf)", lambda: nest.flatten(flat[0])),
    ]
    for name, fn in nest_cases:
        print(f"{name:<34}{_best_us(fn, args.steps, args.repeats):>10.2f}")
    print(f"(TimeStep of DictObsEnv: {len(flat)} leaves)")


if __name__ == "__main__":
    main()
