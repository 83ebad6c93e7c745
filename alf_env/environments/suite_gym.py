"""Loads registered gymnasium environments as :class:`AlfGymWrapper`, as ALF's ``suite_gym``
(the step limit counts the ALF env's steps, as ALF's own does: docs/migration.rst)."""

import dataclasses
from typing import Any, Callable, Iterable, Optional, Union

import gymnasium
import numpy as np
from gymnasium.envs.registration import EnvSpec

from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper

__all__ = ["load", "wrap_env"]

GymWrapper = Callable[[gymnasium.Env[Any, Any]], gymnasium.Env[Any, Any]]
AlfWrapper = Callable[[AlfEnvironment], AlfEnvironment]


def _check_steps(max_episode_steps: Optional[int]) -> None:
    if max_episode_steps is not None and not (
            isinstance(max_episode_steps, (int, np.integer)) and max_episode_steps >= 0):
        raise ValueError(f"max_episode_steps: expected None (the registered limit), 0 (no limit) "
                         f"or a positive int, got {max_episode_steps!r}")


def load(name: Union[str, EnvSpec], env_id: Optional[int] = None, discount: float = 1.0,
         max_episode_steps: Optional[int] = None, gym_env_wrappers: Iterable[GymWrapper] = (),
         alf_env_wrappers: Iterable[AlfWrapper] = (), *,
         float_dtype: Optional[Any] = np.float32, **make_kwargs: Any) -> AlfEnvironment:
    """Makes the gymnasium env ``name`` and wraps it as an ALF environment.

    Args:
        name: a registered gymnasium id, e.g. ``"CartPole-v1"``, or its ``EnvSpec``.
        env_id: id reported in ``TimeStep.env_id``.
        discount: discount of non-terminal steps (see :class:`AlfGymWrapper`).
        max_episode_steps: episodes are truncated after this many steps; ``None`` keeps
            the registered limit, ``0`` means no limit (as in ALF).
        gym_env_wrappers: callables ``wrapper(gym_env) -> gym_env``, applied in order.
        alf_env_wrappers: callables ``wrapper(alf_env) -> alf_env``, applied in order.
        float_dtype: dtype of the specs and observations of floating ``Box`` spaces;
            ``None`` keeps the space's (e.g. MuJoCo's float64).
        **make_kwargs: further keyword arguments of ``gymnasium.make`` and of the env.

    Raises:
        ValueError: if ``max_episode_steps`` is negative or not an int.
    """
    _check_steps(max_episode_steps)
    gym_env_wrappers = tuple(gym_env_wrappers)
    if max_episode_steps == 0 or gym_env_wrappers:
        # Made without gymnasium's limit: wrap_env puts it around the wrappers.
        spec = name if isinstance(name, EnvSpec) else gymnasium.spec(name)
        if max_episode_steps is None:
            max_episode_steps = spec.max_episode_steps or 0
        gym_env = gymnasium.make(dataclasses.replace(spec, max_episode_steps=None), **make_kwargs)
    else:
        gym_env = gymnasium.make(name, max_episode_steps=max_episode_steps, **make_kwargs)
        max_episode_steps = 0  # gymnasium.make applied it
    return wrap_env(gym_env, env_id=env_id, discount=discount, max_episode_steps=max_episode_steps,
                    gym_env_wrappers=gym_env_wrappers, alf_env_wrappers=alf_env_wrappers,
                    float_dtype=float_dtype)


def wrap_env(gym_env: gymnasium.Env, env_id: Optional[int] = None, discount: float = 1.0,
             max_episode_steps: int = 0, gym_env_wrappers: Iterable[GymWrapper] = (),
             alf_env_wrappers: Iterable[AlfWrapper] = (), auto_reset: bool = True, *,
             float_dtype: Optional[Any] = np.float32) -> AlfEnvironment:
    """Wraps a gymnasium env as an ALF environment (ALF's ``suite_gym.wrap_env``).

    Args:
        gym_env: the gymnasium env (owned: closed if wrapping fails, and by the returned
            env's ``close()``).
        env_id, discount, gym_env_wrappers, alf_env_wrappers, float_dtype: as :func:`load`.
        max_episode_steps: if > 0, episodes are truncated after this many steps.
        auto_reset: see :class:`AlfGymWrapper`.

    Raises:
        ValueError: if ``max_episode_steps`` is ``None``, negative or not an int.
    """
    if max_episode_steps is None:
        raise ValueError("max_episode_steps: expected 0 (no limit) or a positive int, "
                         "got None; wrap_env has no registered limit to keep")
    _check_steps(max_episode_steps)
    # The outermost env so far: closing it closes the ones it wraps.
    env: Union[gymnasium.Env[Any, Any], AlfEnvironment] = gym_env
    try:
        wrapped = gym_env
        for wrapper in gym_env_wrappers:
            env = wrapped = wrapper(wrapped)
        if max_episode_steps > 0:
            env = wrapped = gymnasium.wrappers.TimeLimit(wrapped, int(max_episode_steps))
        alf_wrapped: AlfEnvironment = AlfGymWrapper(wrapped, env_id=env_id, discount=discount,
                                                    auto_reset=auto_reset, float_dtype=float_dtype)
        env = alf_wrapped
        for alf_wrapper in alf_env_wrappers:
            env = alf_wrapped = alf_wrapper(alf_wrapped)
    except BaseException:
        env.close()
        raise
    return alf_wrapped
