"""An environment with random observations, for tests and benchmarks, as ALF's."""

from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from alf_env import nest
from alf_env.data_structures import StepType, TimeStep, generate_time_step
from alf_env.dtypes import to_numpy
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

__all__ = ["RandomAlfEnvironment"]


class RandomAlfEnvironment(AlfEnvironment):
    """Produces random observations following ``observation_spec`` with its own
    ``RandomState`` (``_rng``), so ``seed(s)`` makes runs reproducible.

    An episode ends (a termination) with probability ``episode_end_probability`` each
    step; the rows of a batched env share one episode clock.
    """

    def __init__(self, observation_spec: Any, action_spec: Any, env_id: Optional[int] = None,
                 episode_end_probability: float = 0.1, discount: Any = 1.0,
                 reward_fn: Optional[Callable[..., Any]] = None,
                 batch_size: Optional[int] = None, seed: int = 42,
                 render_size: Sequence[int] = (2, 2, 3), min_duration: int = 0,
                 max_duration: Optional[int] = None, use_tensor_time_step: bool = False, *,
                 strict_action_shape: bool = False) -> None:
        """Creates the environment.

        Args:
            env_id: id of row 0 (0 if ``None``).
            discount: discount of ``MID`` steps; a scalar, or one per row.
            reward_fn: ``reward_fn(step_type, action, observation)`` returning the
                reward (of shape ``(batch_size,)`` when batched); zeros if ``None``.
            batch_size: ``None`` for an unbatched env, else the number of rows.
            render_size: shape of the random uint8 image from ``render()``.
            min_duration, max_duration: bounds of an episode's steps (``None``: no max).
            use_tensor_time_step: return torch tensors instead of numpy arrays.
            strict_action_shape: reject (``ValueError``) an action leaf whose shape is
                not the spec's, or, batched, one row's. ``False`` (ALF's behaviour): any
                shape is taken, and a batched env repeats one of another shape per row.

        Raises:
            ValueError: for a per-row ``discount`` of another size, or out-of-range
                probabilities or durations.
        """
        super().__init__()
        if not 0.0 <= episode_end_probability <= 1.0:
            raise ValueError("episode_end_probability must be in [0, 1], got "
                             f"{episode_end_probability}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be None or >= 1, got {batch_size}")
        if max_duration is not None and max_duration < max(min_duration, 1):
            raise ValueError(f"max_duration must be >= max(min_duration, 1) = "
                             f"{max(min_duration, 1)}, got {max_duration}")
        self._observation_spec = observation_spec
        self._action_spec = action_spec
        self._batch_size = batch_size
        self._env_id = 0 if env_id is None else int(env_id)
        self._episode_end_probability = float(episode_end_probability)
        self._reward_fn = reward_fn
        self._rng = np.random.RandomState(seed)
        self._render_size = tuple(render_size)
        self._min_duration = int(min_duration)
        self._max_duration = max_duration
        self._use_tensor = bool(use_tensor_time_step)
        self._strict_action_shape = bool(strict_action_shape)
        self._outer = () if batch_size is None else (batch_size, )
        discount = np.asarray(discount, dtype=np.float32)
        if discount.ndim == 0:
            discount = np.broadcast_to(discount, self._outer).copy()
        elif discount.shape != self._outer:
            raise ValueError(f"discount: expected a scalar or shape {self._outer} (one per row of "
                             f"batch_size={batch_size}), got shape {discount.shape}")
        self._discount = discount
        self._sample_specs = nest.map_structure(  # unbounded leaves get default bounds
            lambda s: s if isinstance(s, BoundedTensorSpec) else BoundedTensorSpec.from_spec(s),
            observation_spec)
        self._done = True
        self._num_steps = 0
        self._env_ids = (np.int32(self._env_id) if batch_size is None else
                         np.arange(batch_size, dtype=np.int32) + np.int32(self._env_id))

    @property
    def batched(self) -> bool:
        """Whether ``batch_size`` was given."""
        return self._batch_size is not None

    @property
    def batch_size(self) -> int:
        return 1 if self._batch_size is None else self._batch_size

    @property
    def is_tensor_based(self) -> bool:
        """Whether outputs are torch tensors (``use_tensor_time_step``)."""
        return self._use_tensor

    def observation_spec(self) -> Any:
        return self._observation_spec

    def action_spec(self) -> Any:
        return self._action_spec

    def seed(self, seed: int) -> None:
        """Reseeds ``_rng`` (observations, episode ends and renders)."""
        self._rng.seed(seed)

    def render(self, mode: str = "rgb_array") -> np.ndarray:
        """A random uint8 image of shape ``render_size`` (``'rgb_array'`` is the only mode)."""
        if mode != "rgb_array":
            raise ValueError(f"render: mode must be 'rgb_array', got {mode!r}")
        return self._rng.randint(0, 256, size=self._render_size, dtype=np.uint8)

    def _observation(self) -> Any:
        outer = self._outer if self._outer else None
        return nest.map_structure(lambda s: s.numpy_sample(outer, self._rng), self._sample_specs)

    def _convert_action(self, action: Any) -> Any:
        try:
            nest.assert_same_structure(self._action_spec, action)
        except nest.NestStructureError as err:
            raise nest.NestStructureError(
                f"action does not match the action spec: {err}") from None

        def convert(path: str, spec: TensorSpec, leaf: Any) -> np.ndarray:
            array = np.asarray(to_numpy(leaf))
            expected = self._outer + tuple(spec.shape)
            if array.shape != expected:
                if self._outer and (array.shape == tuple(spec.shape)
                                    or not self._strict_action_shape):
                    # One action for the whole batch (ALF repeats it per row).
                    array = np.broadcast_to(array, self._outer + array.shape)
                elif self._strict_action_shape:
                    raise ValueError(f"{nest.field_name('action', path)}: expected shape "
                                     f"{expected} and dtype {spec.numpy_dtype}, got shape "
                                     f"{array.shape}; pass strict_action_shape=False to take "
                                     f"any shape")
            return np.array(array, dtype=spec.numpy_dtype)

        if not nest.is_nested(self._action_spec) and not nest.is_nested(action):
            return convert("", self._action_spec, action)  # no walk of two leaves
        return nest.map_structure_with_path(convert, self._action_spec, action)

    def _reward(self, step_type: np.int32, action: Any, observation: Any) -> np.ndarray:
        if self._reward_fn is None:
            return np.zeros(self._outer, dtype=np.float32)
        reward = np.asarray(to_numpy(self._reward_fn(step_type, action, observation)),
                            dtype=np.float32)
        if reward.shape != self._outer:
            raise ValueError(f"reward_fn: expected a reward of shape {self._outer}, "
                             f"got shape {reward.shape}")
        return reward

    def _make(self, step_type: np.int32, observation: Any, discount: Any,
              prev_action: Any = None, reward: Any = None) -> TimeStep:
        if self._use_tensor:
            observation = nest.map_structure(torch.from_numpy, observation)
            if prev_action is not None:
                prev_action = nest.map_structure(torch.from_numpy, prev_action)
        return generate_time_step(
            self.batched, observation, step_type, discount, prev_action=prev_action,
            action_spec=self._action_spec, reward=reward, env_id=self._env_ids, env_info={},
            use_tensor=self._use_tensor)

    def _reset(self) -> TimeStep:
        self._done = False
        self._num_steps = 0
        return self._make(StepType.FIRST, self._observation(), 1.0)

    def _step(self, action: Any) -> TimeStep:
        if self._done:
            return self.reset()
        action = self._convert_action(action)
        self._num_steps += 1
        observation = self._observation()
        if self._num_steps < self._min_duration:
            done = False
        elif self._max_duration is not None and self._num_steps >= self._max_duration:
            done = True
        else:
            done = bool(self._rng.uniform() < self._episode_end_probability)
        self._done = done
        step_type = StepType.LAST if done else StepType.MID
        reward = self._reward(step_type, action, observation)
        discount = 0.0 if done else self._discount
        return self._make(step_type, observation, discount, action, reward)
