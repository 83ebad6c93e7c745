"""What an actor hosts: a local batched env over its share of the envs, answering
``EnvActor.run`` with plain numpy data, which Ray moves without extra copies."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np

from alf_env import nest
from alf_env.environments.members_specs import BatchSpecs
from alf_env.front_ends.gym.state import Step
from alf_env.front_ends.gym.vector_env import FastVectorEnv
from alf_env.lazy_import import import_from


class GymHost:
    """A ``FastVectorEnv`` of an actor's share of the envs (runs in the actor)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]],
                 vector_kwargs: Dict[str, Any]) -> None:
        self.env = FastVectorEnv(env_fns, **vector_kwargs)

    def describe(self) -> Tuple[gym.Space[Any], gym.Space[Any], Dict[str, Any], Optional[str]]:
        """``(single_observation_space, single_action_space, metadata, render_mode)``."""
        env = self.env
        metadata = {k: v for k, v in env.metadata.items() if k != "autoreset_mode"}
        return env.single_observation_space, env.single_action_space, metadata, env.render_mode

    def reset(self, seed: Optional[List[Optional[int]]],
              options: Optional[Dict[str, Any]]) -> Tuple[Any, Dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: Any) -> Step:
        return self.env.step(actions)

    def call(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Any, ...]:
        return self.env.call(name, *args, **kwargs)

    def set_attr(self, name: str, values: List[Any]) -> None:
        self.env.set_attr(name, values)

    def worker_pids(self) -> List[int]:
        return self.env.worker_pids()

    def close(self, terminate: bool = False) -> None:
        self.env.close(terminate=terminate)


class AlfHost:
    """A ``FastParallelEnvironment`` of an actor's share (runs in the actor)."""

    def __init__(self, ctors: List[Callable[..., Any]], env_kwargs: Dict[str, Any]) -> None:
        from alf_env.front_ends.alf.fast_parallel_environment import FastParallelEnvironment
        self.env = FastParallelEnvironment(ctors, **env_kwargs)

    def describe(self) -> BatchSpecs:
        """The env's specs and batch size."""
        return BatchSpecs.of(self.env, self.env.batch_size)

    def reset(self) -> Any:
        return _to_numpy(self.env.reset())

    def step(self, flat_action: List[np.ndarray]) -> Any:
        action = nest.pack_sequence_as(self.env.action_spec(),
                                       [_torch().from_numpy(a) for a in flat_action])
        return _to_numpy(self.env.step(action))

    def seed(self, seeds: List[int]) -> None:
        self.env.seed(seeds)

    def call_envs_with_same_args(self, name: str, args: Tuple[Any, ...],
                                 kwargs: Dict[str, Any]) -> List[Any]:
        return self.env.call_envs_with_same_args(name, *args, **kwargs)

    def render(self, mode: str) -> Any:
        return self.env.render(mode)

    def worker_pids(self) -> List[int]:
        return self.env.worker_pids()

    def close(self, terminate: bool = False) -> None:
        self.env.close()


def _to_numpy(time_step: Any) -> Any:
    return nest.map_structure(
        lambda t: t.numpy() if isinstance(t, _torch().Tensor) else t, time_step)


def _torch() -> Any:
    """torch, imported only by the ALF host (the gym path stays torch-free)."""
    return import_from("torch")
