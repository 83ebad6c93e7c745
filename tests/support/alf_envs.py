"""AlfEnvironments for the batched-env tests.

``CountingEnv`` makes every row checkable: its observation is
``(env_id, step in episode, episode count, last action)`` and episode lengths
come from its seeded RNG. Faults are injected on request (see probe_envs.inject).
"""

import time
from typing import Any

import numpy as np
import torch

from alf_env.data_structures import StepType, TimeStep
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec
from tests.support.probe_envs import inject

NUM_ACTIONS = 4


class CountingEnv(AlfEnvironment):
    """An unbatched env whose observations tell who produced them and when.

    Args:
        env_id: written into ``observation[0]``.
        min_length, max_length: episode lengths are drawn from this range.
        reset_delay: seconds each reset sleeps (to test spare envs).
        step_delay_max: each step sleeps a random time up to this.
        fault, fault_phase: inject ``fault`` in "ctor", "reset", "step" (at
            the ``fault_step``-th step), "call" (``fail()``) or "close".
    """

    def __init__(self, env_id: int = 0, min_length: int = 3, max_length: int = 8,
                 reset_delay: float = 0.0, step_delay_max: float = 0.0,
                 fault: str = "", fault_phase: str = "", fault_step: int = 3) -> None:
        super().__init__()
        self._env_id = env_id
        self._min_length = min_length
        self._max_length = max_length
        self._reset_delay = reset_delay
        self._step_delay_max = step_delay_max
        self._fault = fault
        self._fault_phase = fault_phase
        self._fault_step = fault_step
        self._rng = np.random.RandomState(env_id)
        # Delays have their own RNG so they do not change episode lengths.
        self._delay_rng = np.random.RandomState(env_id + 10_000)
        self._t = 0
        self._length = 0
        self._episode = -1
        self._total_steps = 0
        if fault_phase == "ctor":
            inject(fault)

    def observation_spec(self):
        return TensorSpec((4,), torch.float32)

    def action_spec(self):
        return BoundedTensorSpec((), torch.int64, 0, NUM_ACTIONS - 1)

    def seed(self, seed: int) -> None:
        self._rng = np.random.RandomState(seed)

    def fail(self) -> None:
        inject(self._fault)

    def _obs(self, action: float) -> np.ndarray:
        return np.array([self._env_id, self._t, self._episode, action], np.float32)

    def _time_step(self, step_type, reward, discount, action) -> TimeStep:
        return TimeStep(step_type=np.int32(step_type), reward=np.float32(reward),
                        discount=np.float32(discount), observation=self._obs(action),
                        prev_action=np.int64(action), env_id=np.int32(self._env_id),
                        env_info={})

    def _reset(self) -> TimeStep:
        if self._fault_phase == "reset":
            inject(self._fault)
        if self._reset_delay:
            time.sleep(self._reset_delay)
        self._t = 0
        self._episode += 1
        self._length = int(self._rng.randint(self._min_length, self._max_length + 1))
        return self._time_step(StepType.FIRST, 0.0, 1.0, 0)

    def _step(self, action: Any) -> TimeStep:
        if self.current_time_step().is_last():
            return self.reset()
        self._total_steps += 1
        if self._fault_phase == "step" and self._total_steps >= self._fault_step:
            inject(self._fault)
        if self._step_delay_max:
            time.sleep(self._delay_rng.uniform(0, self._step_delay_max))
        action = int(action)
        self._t += 1
        if self._t >= self._length:
            # Alternate terminated (discount 0) and truncated (discount 1) endings.
            return self._time_step(StepType.LAST, action, self._episode % 2, action)
        return self._time_step(StepType.MID, action, 1.0, action)

    def render(self, mode: str = "rgb_array") -> np.ndarray:
        return np.full((2, 2, 3), self._env_id, np.uint8)

    def _close(self) -> None:
        if self._fault_phase == "close":
            inject(self._fault)
