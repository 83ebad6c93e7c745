"""What an actor hosts: a local batched env over its share of the envs.

These objects are built inside the actors (by :class:`~alf_env.distributed.actor.EnvActor`)
and called through ``EnvActor.run``; they return plain numpy data, which Ray
moves without copying more than once.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from alf_env.vector import FastVectorEnv


def plan_shares(num_envs: int, num_actors: int, batch_size: int,
                autoreset_mode: AutoresetMode) -> List[range]:
    """Splits env ids ``0 .. num_envs - 1`` into consecutive shares, one per actor.

    Shares differ in size by at most one. The asynchronous mode
    (``batch_size < num_envs``) needs equal shares and a ``batch_size`` that
    is a multiple of the share, since an actor is its unit of asynchrony.

    Raises:
        ValueError: naming the argument that does not fit.
    """
    if num_envs == 0:
        raise ValueError("env_fns: expected at least one env constructor, got none")
    if not 1 <= int(num_actors) <= num_envs:
        raise ValueError(f"num_actors: expected 1 <= num_actors <= {num_envs} (the number "
                         f"of envs), got {num_actors}")
    if not 1 <= batch_size <= num_envs:
        raise ValueError(f"batch_size: expected 1 <= batch_size <= {num_envs} (the number "
                         f"of envs), got {batch_size}")
    bounds = np.linspace(0, num_envs, int(num_actors) + 1).round().astype(int)
    shares = [range(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    if batch_size < num_envs:
        share = num_envs // int(num_actors)
        if num_envs % int(num_actors) or batch_size % share:
            raise ValueError(
                f"batch_size: the asynchronous mode returns whole actors, so num_envs "
                f"({num_envs}) must be a multiple of num_actors ({num_actors}) and "
                f"batch_size a multiple of the envs per actor ({num_envs / num_actors:g}); "
                f"got batch_size={batch_size}")
        if autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError("autoreset_mode: the asynchronous mode (batch_size < num_envs) "
                             "resets envs on its own; use NEXT_STEP or SAME_STEP, not DISABLED")
    return shares


class GymHost:
    """A ``FastVectorEnv`` of an actor's share of the envs (runs in the actor).

    Args:
        env_fns: the share's env constructors.
        vector_kwargs: ``FastVectorEnv`` arguments.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]],
                 vector_kwargs: Dict[str, Any]) -> None:
        self.env = FastVectorEnv(env_fns, **vector_kwargs)

    def describe(self) -> tuple:
        """``(single_observation_space, single_action_space, metadata, render_mode)``."""
        env = self.env
        metadata = {k: v for k, v in env.metadata.items() if k != "autoreset_mode"}
        return env.single_observation_space, env.single_action_space, metadata, env.render_mode

    def reset(self, seed: Optional[List[Optional[int]]], options: Optional[dict]) -> tuple:
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: Any) -> tuple:
        return self.env.step(actions)

    def call(self, name: str, args: tuple, kwargs: dict) -> tuple:
        return self.env.call(name, *args, **kwargs)

    def set_attr(self, name: str, values: list) -> None:
        self.env.set_attr(name, values)

    def worker_pids(self) -> List[int]:
        return self.env.worker_pids()

    def close(self, terminate: bool = False) -> None:
        self.env.close(terminate=terminate)
