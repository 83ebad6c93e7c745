"""RayParallelAlfEnvironment: the ``ParallelAlfEnvironment`` contract on Ray actors, each
stepping its share in a local ``FastParallelEnvironment`` (docs/distributed.rst)."""

import functools
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from alf_env import nest
from alf_env.control_plane.spec_checks import ActionChecker
from alf_env.control_plane.worker import construct_env
from alf_env.data_structures import TimeStep
from alf_env.environments.members_specs import BatchedEnvironment, BatchSpecs
from alf_env.errors import EnvTimeoutError
from alf_env.front_ends.alf.workers import check_seeds
from alf_env.front_ends.ray.engine import (
    ActorOptions,
    EnvActors,
    options_per_actor,
    raise_first_failure,
)
from alf_env.front_ends.ray.hosts import AlfHost
from alf_env.front_ends.ray.restart import RestartPolicy
from alf_env.front_ends.ray.shares import plan_shares

__all__ = ["RayParallelAlfEnvironment"]


class RayParallelAlfEnvironment(BatchedEnvironment):
    """Batched ALF environment whose envs run on ``num_actors`` Ray actors.

    Args:
        env_constructors: one constructor per env; it gets ``env_id`` (its index
            here) if its signature accepts one.
        num_actors, actor_options, start_timeout: as for ``RayVectorEnv``.
        restart_policy: recreate dead actors (``None``: a death raises ``ActorDiedError``).
        timeout: seconds each reset, step and call may wait; then
            ``EnvTimeoutError`` (after a reset or step, only ``close()`` is left).
        env_kwargs: arguments of each actor's ``FastParallelEnvironment``.
    """

    def __init__(self, env_constructors: Sequence[Callable[..., Any]], *, num_actors: int,
                 actor_options: ActorOptions = None, restart_policy: Optional[RestartPolicy] = None,
                 timeout: Optional[float] = None, env_kwargs: Optional[Dict[str, Any]] = None,
                 start_timeout: float = 300.0) -> None:
        ctors = list(env_constructors)
        self._shares = plan_shares(len(ctors), num_actors, len(ctors), None)
        self._timeout = timeout
        factories = [functools.partial(AlfHost, [functools.partial(_with_env_id, ctors[i], i)
                                                 for i in share], dict(env_kwargs or {}))
                     for share in self._shares]
        options = options_per_actor(actor_options, len(self._shares))
        self._group = EnvActors(
            factories, self._shares, actor_options=options, restart_policy=restart_policy,
            on_restart=lambda j, job: self._group.post(j, "reset", restarted=True),
            start_timeout=start_timeout)
        described: List[BatchSpecs] = self._group.start()  # AlfHost.describe of each
        sizes = [specs.batch_size for specs in described]
        offsets = np.cumsum([0] + sizes[:-1]).tolist()
        self._bounds = [(o, o + s) for o, s in zip(offsets, sizes)]
        self._env_id_offsets = torch.from_numpy(np.repeat(offsets, sizes).astype(np.int32))
        super().__init__(described[0]._replace(batch_size=int(sum(sizes))))
        self._check_action = ActionChecker(self.action_spec(), self.batch_size)

    def seed(self, seeds: Sequence[int]) -> None:
        """Seeds env ``i`` with ``seeds[i]`` (one seed per env)."""
        self._check_usable()
        seeds = check_seeds(seeds, self._shares[-1].stop, num_spares=0)
        self._group.call_all("seed", [(seeds[s.start:s.stop],) for s in self._shares],
                             self._timeout, "seed")

    def call_envs_with_same_args(self, name: str, *args: Any, **kwargs: Any) -> List[Any]:
        """Calls ``env.name(*args, **kwargs)`` in every env; their values in env order."""
        self._check_usable()
        values = self._group.call_all("call_envs_with_same_args",
                                      [(name, args, kwargs)] * len(self._shares),
                                      self._timeout, f"call of {name!r}")
        return [v for group in values for v in group]

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders env 0 (on actor 0)."""
        self._check_usable()
        return self._group.call_all("render", {0: (mode,)}, self._timeout, "render")[0]

    def actor_info(self) -> List[Dict[str, Any]]:
        """Where each actor runs (see ``RayVectorEnv.actor_info``)."""
        self._check_usable()
        return self._group.info()

    def actor_handles(self) -> List[Any]:
        """The Ray actor handles, by actor index."""
        self._check_usable()
        return list(self._group.actors)

    def _reset(self) -> TimeStep:
        self._check_usable()
        for j in range(len(self._shares)):
            self._group.post(j, "reset", restarted=j in self._group.fresh)
        return self._gather("reset")

    def _step(self, action: Any) -> TimeStep:
        self._check_usable()
        flat = self._check_action.flat(action)
        for j, (lo, hi) in enumerate(self._bounds):
            if j in self._group.fresh:
                self._group.post(j, "reset", restarted=True)
            else:
                self._group.post(j, "step", [a[lo:hi] for a in flat])
        return self._gather("step")

    def _gather(self, during: str) -> TimeStep:
        n = len(self._shares)
        try:
            results = sorted(self._group.collect(range(n), n, self._timeout, during))
        except EnvTimeoutError as exc:
            self._group.broken = exc  # as ParallelAlfEnvironment: only close() is left
            raise
        raise_first_failure(results)
        parts = [value for _, _, value in results]
        time_step: TimeStep = nest.map_structure(
            lambda *xs: torch.from_numpy(np.concatenate(xs)), *parts)
        return time_step._replace(env_id=time_step.env_id + self._env_id_offsets)

    def _check_usable(self) -> None:
        self._check_not_closed()
        if self._group.broken is not None:
            raise self._group.broken

    def _close(self) -> None:
        self._group.close()


def _with_env_id(ctor: Callable[..., Any], global_id: int, **_: Any) -> Any:
    """Calls ``ctor`` with the front end's env id, not the actor's (as ``construct_env``)."""
    return construct_env(ctor, global_id)
