"""``make``: copies of a registered env in a FastVectorEnv (``gymnasium.make_vec``'s twin)."""

import functools
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import gymnasium as gym

from alf_env.front_ends.gym.vector_env import FastVectorEnv


def make(env_id: Union[str, gym.envs.registration.EnvSpec], num_envs: int = 1, *,
         vector_kwargs: Optional[Dict[str, Any]] = None,
         wrappers: Optional[Sequence[Callable[[gym.Env], gym.Wrapper]]] = None,
         **kwargs: Any) -> FastVectorEnv:
    """Builds a :class:`FastVectorEnv` of ``num_envs`` copies of a registered env, as
    ``gymnasium.make_vec``: ``kwargs`` go to ``gymnasium.make``, ``vector_kwargs`` to
    :class:`FastVectorEnv`."""
    env_fn = functools.partial(_make_one, env_id, tuple(wrappers or ()), kwargs)
    env = FastVectorEnv([env_fn] * num_envs, **(vector_kwargs or {}))
    try:
        env.spec = gym.spec(env_id) if isinstance(env_id, str) else env_id
    except gym.error.Error:  # e.g. "module:Env-v0" registered in the workers only
        env.spec = None
    return env


def _make_one(env_id: Union[str, gym.envs.registration.EnvSpec],
              wrappers: Tuple[Callable[[gym.Env], gym.Wrapper], ...],
              kwargs: Dict[str, Any]) -> gym.Env:
    env = gym.make(env_id, **kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env
