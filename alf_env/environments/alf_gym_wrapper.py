"""Wraps a ``gymnasium.Env`` as an (unbatched) :class:`AlfEnvironment`.

Spaces become spec nests (see :func:`tensor_spec_from_gym_space`):

=================  ==========================================================
gymnasium space    spec
=================  ==========================================================
``Box``            ``BoundedTensorSpec(shape, dtype, low, high)``
``Discrete``       ``BoundedTensorSpec((), int64, start, start + n - 1)``
``MultiDiscrete``  ``BoundedTensorSpec(nvec.shape, dtype, start, start + nvec - 1)``
``MultiBinary``    ``BoundedTensorSpec(shape, int8, 0, 1)``
``Dict``           ``dict`` of the sub-specs (keys sorted)
``Tuple``          ``tuple`` of the sub-specs
=================  ==========================================================

Episode ends: gymnasium's ``terminated`` gives a ``LAST`` step with discount 0;
``truncated`` (e.g. a time limit) gives a ``LAST`` step with the wrapper's
``discount`` (1 by default), so values can still be bootstrapped. The step
after a ``LAST`` step resets the gymnasium env and returns a ``FIRST`` step.

Observations are numpy arrays of the spec dtypes; actions may be numpy arrays,
torch tensors or Python numbers.

``env_info`` rule: the info dicts are reduced to their fixed-size numeric
entries. When the wrapper is created it runs one probe (``reset()`` then one
``step()`` with a fixed valid action) and keeps every entry of the two info
dicts whose value converts with ``np.asarray`` to a bool, integer or float
array (nested dicts are kept as nested dicts; strings, ``None``, objects and
ragged lists are dropped). Those entries, keys sorted, form
``env_info_spec()``. Every time step then reports exactly those entries, cast
to the spec dtype; an entry missing from an info dict is reported as zeros, an
entry whose shape changed raises ``ValueError``, and new entries are ignored.
Pass ``env_info_spec`` to skip the probe.
"""

import collections.abc
from typing import Any, Dict, Optional

import gymnasium
import numpy as np
import torch
from gymnasium import spaces

from alf_env import nest
from alf_env.data_structures import TimeStep, restart, termination, transition, truncation
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.tensor_specs import (BoundedTensorSpec, TensorSpec, numpy_dtype_to_torch)

__all__ = ["AlfGymWrapper", "tensor_spec_from_gym_space"]

_NUMERIC_KINDS = "biuf"  # numpy dtype kinds kept in env_info


def _field(prefix: str, path: str) -> str:
    """``prefix.path``, or ``prefix`` for the root path ``""``."""
    return f"{prefix}.{path}" if path else prefix


def _join(path: str, key: Any) -> str:
    """The path of child ``key`` under ``path``."""
    return f"{path}.{key}" if path else str(key)


def tensor_spec_from_gym_space(space: spaces.Space, path: str = "") -> Any:
    """Converts a gymnasium space to a nest of ``BoundedTensorSpec``.

    Args:
        space: a ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``,
            ``Dict`` or ``Tuple`` space (nested freely).
        path: where ``space`` sits, for error messages.

    Returns:
        The spec nest (see the module docstring for the mapping).

    Raises:
        TypeError: for any other kind of space, naming its path.
    """
    where = path or "<root>"
    if isinstance(space, spaces.Box):
        return BoundedTensorSpec(space.shape, space.dtype, space.low, space.high)
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return BoundedTensorSpec((), numpy_dtype_to_torch(space.dtype), start,
                                 start + int(space.n) - 1)
    if isinstance(space, spaces.MultiDiscrete):
        start = np.asarray(space.start)
        return BoundedTensorSpec(space.nvec.shape, space.dtype, start,
                                 start + np.asarray(space.nvec) - 1)
    if isinstance(space, spaces.MultiBinary):
        return BoundedTensorSpec(space.shape, space.dtype, 0, 1)
    if isinstance(space, spaces.Dict):
        return {k: tensor_spec_from_gym_space(s, _join(path, k))
                for k, s in sorted(space.spaces.items())}
    if isinstance(space, spaces.Tuple):
        return tuple(tensor_spec_from_gym_space(s, _join(path, i))
                     for i, s in enumerate(space.spaces))
    raise TypeError(
        f"space at {where}: expected Box, Discrete, MultiDiscrete, MultiBinary, "
        f"Dict or Tuple, got {type(space).__name__} ({space})")


def _to_numpy(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return value


def _info_spec(info: Any) -> Any:
    """The spec nest of the fixed-size numeric entries of an info dict."""
    out: Dict[Any, Any] = {}
    for key, value in info.items():
        if isinstance(value, collections.abc.Mapping):
            sub = _info_spec(value)
            if sub:
                out[key] = sub
            continue
        try:
            array = np.asarray(_to_numpy(value))
        except (ValueError, TypeError):
            continue  # ragged or not convertible
        if array.dtype.kind not in _NUMERIC_KINDS:
            continue
        out[key] = TensorSpec.from_array(array)
    return out


def _merge_info_specs(first: Dict[Any, Any], second: Dict[Any, Any]) -> Dict[Any, Any]:
    merged = dict(first)
    for key, spec in second.items():
        if isinstance(spec, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_info_specs(merged[key], spec)
        else:
            merged[key] = spec
    return merged


def _fetch_info(spec: Any, info: Any, path: str) -> Any:
    """The entries of ``info`` selected by the dict of specs ``spec``."""
    if isinstance(spec, TensorSpec):
        if info is None:
            return spec.numpy_zeros()
        array = np.asarray(_to_numpy(info))
        if array.shape != tuple(spec.shape):
            raise ValueError(
                f"{_field('env_info', path)}: expected shape {tuple(spec.shape)} "
                f"(fixed by env_info_spec), got shape {array.shape}")
        return array.astype(spec.numpy_dtype)
    if not isinstance(info, collections.abc.Mapping):
        info = {}
    return type(spec)((key, _fetch_info(spec[key], info.get(key), _join(path, key)))
                      for key in sorted(spec))


class AlfGymWrapper(AlfEnvironment):
    """An :class:`AlfEnvironment` over a ``gymnasium.Env``; see the module doc.

    Unknown public attributes are looked up on the wrapped gymnasium env.
    """

    def __init__(self,
                 gym_env: gymnasium.Env,
                 env_id: Optional[int] = None,
                 discount: float = 1.0,
                 auto_reset: bool = True,
                 env_info_spec: Optional[Any] = None) -> None:
        """Wraps ``gym_env``.

        Args:
            gym_env: the gymnasium environment (owned: ``close()`` closes it).
            env_id: id reported in ``TimeStep.env_id`` (0 if ``None``).
            discount: discount of ``MID`` steps and of truncated ``LAST`` steps.
            auto_reset: reset automatically on the step after ``LAST``; if
                ``False`` that step is passed to the gymnasium env as is.
            env_info_spec: dict of ``TensorSpec`` for ``env_info``; if ``None``
                it is found by the probe described in the module docstring.

        Raises:
            TypeError: if a space has no spec equivalent.
        """
        super().__init__()
        self._gym_env = gym_env
        self._env_id = np.int32(0 if env_id is None else env_id)
        self._discount = np.float32(discount)
        self._auto_reset = auto_reset
        self._observation_spec = tensor_spec_from_gym_space(gym_env.observation_space)
        self._action_spec = tensor_spec_from_gym_space(gym_env.action_space)
        self._pending_seed: Optional[int] = None
        self._done = True
        if env_info_spec is None:
            env_info_spec = self._probe_env_info_spec()
        self._env_info_spec = env_info_spec

    # ----- probing ----------------------------------------------------------
    def _fixed_action(self) -> Any:
        """A valid, deterministic action: 0 clipped into the action bounds."""
        fixed = nest.map_structure(
            lambda s: np.clip(s.numpy_zeros(), s.minimum, s.maximum).astype(s.numpy_dtype),
            self._action_spec)
        return self._to_gym_action(self._gym_env.action_space, fixed)

    def _probe_env_info_spec(self) -> Dict[Any, Any]:
        _, reset_info = self._gym_env.reset()
        *_, step_info = self._gym_env.step(self._fixed_action())
        return _merge_info_specs(_info_spec(reset_info), _info_spec(step_info))

    # ----- AlfEnvironment API -----------------------------------------------
    @property
    def gym_env(self) -> gymnasium.Env:
        """The wrapped gymnasium env."""
        return self._gym_env

    def observation_spec(self) -> Any:
        """The spec nest of ``observation_space``."""
        return self._observation_spec

    def action_spec(self) -> Any:
        """The spec nest of ``action_space``."""
        return self._action_spec

    def env_info_spec(self) -> Any:
        """The spec of the numeric info entries (see the module docstring)."""
        return self._env_info_spec

    def seed(self, seed: int) -> None:
        """Seeds the next gymnasium ``reset`` (and the action space)."""
        self._pending_seed = int(seed)
        self._gym_env.action_space.seed(int(seed))

    def render(self, mode: str = "rgb_array") -> Any:
        """Returns ``gym_env.render()``.

        gymnasium fixes the render mode when the env is made, so ``mode`` must
        equal the env's ``render_mode``.

        Raises:
            ValueError: if the env has no render mode or a different one.
        """
        render_mode = getattr(self._gym_env, "render_mode", None)
        if render_mode != mode:
            raise ValueError(
                f"render: the gymnasium env was made with render_mode={render_mode!r} "
                f"but render was asked for mode {mode!r}; pass render_mode={mode!r} "
                f"when making the env")
        return self._gym_env.render()

    def _close(self) -> None:
        self._gym_env.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        gym_env = self.__dict__.get("_gym_env")
        if gym_env is None:
            raise AttributeError(name)
        return getattr(gym_env, name)

    # ----- conversions --------------------------------------------------------
    def _observation(self, observation: Any) -> Any:
        try:
            nest.assert_same_structure(self._observation_spec, observation,
                                       check_types=False)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"observation returned by the gymnasium env does not match the "
                f"observation space: {err}") from None
        return nest.map_structure(
            lambda s, x: np.asarray(_to_numpy(x), dtype=s.numpy_dtype),
            self._observation_spec, observation, check_types=False)

    def _action_arrays(self, action: Any) -> Any:
        try:
            nest.assert_same_structure(self._action_spec, action, check_types=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"action does not match the action spec: {err}") from None

        def convert(path: str, spec: TensorSpec, leaf: Any) -> np.ndarray:
            array = np.asarray(_to_numpy(leaf))
            if array.shape != tuple(spec.shape):
                raise ValueError(
                    f"{_field('action', path)}: expected shape {tuple(spec.shape)} "
                    f"and dtype {spec.numpy_dtype}, got shape {array.shape}")
            return array.astype(spec.numpy_dtype)

        return nest.map_structure_with_path(convert, self._action_spec, action,
                                            check_types=False)

    def _to_gym_action(self, space: spaces.Space, action: Any) -> Any:
        if isinstance(space, spaces.Dict):
            return {k: self._to_gym_action(s, action[k]) for k, s in space.spaces.items()}
        if isinstance(space, spaces.Tuple):
            return tuple(self._to_gym_action(s, a) for s, a in zip(space.spaces, action))
        if isinstance(space, spaces.Discrete):
            return np.asarray(action, dtype=space.dtype).reshape(()).item()
        return np.asarray(action, dtype=space.dtype)

    def _env_info(self, info: Any) -> Any:
        return _fetch_info(self._env_info_spec, info, "")

    @staticmethod
    def _reward(reward: Any) -> np.ndarray:
        value = np.asarray(_to_numpy(reward), dtype=np.float32)
        if value.shape != ():
            raise ValueError(f"reward: expected a scalar (reward_spec shape ()), got "
                             f"shape {value.shape}")
        return value

    # ----- stepping -----------------------------------------------------------
    def _reset(self) -> TimeStep:
        seed, self._pending_seed = self._pending_seed, None
        observation, info = self._gym_env.reset(seed=seed)
        self._done = False
        return restart(self._observation(observation), self._action_spec,
                       env_id=self._env_id, env_info=self._env_info(info))

    def _step(self, action: Any) -> TimeStep:
        if self._done and self._auto_reset:
            return self.reset()
        action = self._action_arrays(action)
        observation, reward, terminated, truncated, info = self._gym_env.step(
            self._to_gym_action(self._gym_env.action_space, action))
        self._done = bool(terminated or truncated)
        args = (self._observation(observation), action, self._reward(reward))
        kwargs = dict(env_id=self._env_id, env_info=self._env_info(info))
        if terminated:
            return termination(*args, **kwargs)
        if truncated:
            return truncation(*args, discount=self._discount, **kwargs)
        return transition(*args, discount=self._discount, **kwargs)
