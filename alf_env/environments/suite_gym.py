"""Loads registered gymnasium environments as :class:`AlfGymWrapper`."""

from typing import Any, Optional

import gymnasium

from alf_env.environments.alf_gym_wrapper import AlfGymWrapper

__all__ = ["load"]


def load(name: str,
         env_id: Optional[int] = None,
         discount: float = 1.0,
         max_episode_steps: Optional[int] = None,
         **make_kwargs: Any) -> AlfGymWrapper:
    """Makes the gymnasium env ``name`` and wraps it as an ALF environment.

    Args:
        name: a registered gymnasium id, e.g. ``"CartPole-v1"``.
        env_id: id reported in ``TimeStep.env_id``.
        discount: discount of non-terminal steps (see :class:`AlfGymWrapper`).
        max_episode_steps: passed to ``gymnasium.make``: episodes are truncated
            after this many steps (``None`` keeps the registered limit).
        **make_kwargs: further keyword arguments of ``gymnasium.make``
            (e.g. ``render_mode``) and of the env's constructor.

    Returns:
        The wrapped environment.
    """
    gym_env = gymnasium.make(name, max_episode_steps=max_episode_steps, **make_kwargs)
    try:
        return AlfGymWrapper(gym_env, env_id=env_id, discount=discount)
    except BaseException:
        gym_env.close()
        raise
