"""Wrappers of :class:`AlfEnvironment`: ALF's base wrapper, and a batch of envs stepped
one after another in this process."""

from typing import Any, List, Sequence

import numpy as np

from alf_env import nest
from alf_env.data_structures import TimeStep
from alf_env.environments.alf_environment import AlfEnvironment, forward_attribute
from alf_env.environments.members_specs import SPEC_METHODS, BatchedEnvironment, BatchSpecs

__all__ = ["AlfEnvironmentBaseWrapper", "BatchEnvironmentWrapper"]


class AlfEnvironmentBaseWrapper(AlfEnvironment):
    """Wraps an :class:`AlfEnvironment` and forwards everything to it (ALF's class).

    A subclass (e.g. for ``suite_gym.load(..., alf_env_wrappers=...)``) overrides what it
    changes: ``_reset`` / ``_step`` (calling ``self._env``) or the spec methods.
    """

    def __init__(self, env: AlfEnvironment) -> None:
        """Wraps ``env`` (owned: ``close()`` closes it)."""
        super().__init__()
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return forward_attribute(self, "_env", name)

    def wrapped_env(self) -> AlfEnvironment:
        """The env this wrapper wraps."""
        return self._env

    @property
    def batched(self) -> bool:
        return self._env.batched

    @property
    def batch_size(self) -> int:
        return self._env.batch_size

    @property
    def is_tensor_based(self) -> bool:
        return self._env.is_tensor_based

    def observation_spec(self) -> Any:
        return self._env.observation_spec()

    def action_spec(self) -> Any:
        return self._env.action_spec()

    def reward_spec(self) -> Any:
        return self._env.reward_spec()

    def env_info_spec(self) -> Any:
        return self._env.env_info_spec()

    def time_step_spec(self) -> TimeStep:
        return self._env.time_step_spec()

    @property
    def num_tasks(self) -> int:
        return self._env.num_tasks

    @property
    def task_names(self) -> List[str]:
        return self._env.task_names

    def seed(self, seed: int) -> None:
        return self._env.seed(seed)

    def render(self, mode: str = "rgb_array") -> Any:
        return self._env.render(mode)

    def sync_progress(self, progress: Any = None) -> None:
        self._env.sync_progress(progress)

    def get_info(self) -> Any:
        return self._env.get_info()

    def _reset(self) -> TimeStep:
        return self._env.reset()

    def _step(self, action: Any) -> TimeStep:
        return self._env.step(action)

    def _close(self) -> None:
        self._env.close()


class BatchEnvironmentWrapper(BatchedEnvironment):
    """Batches n unbatched environments with identical specs: row ``i`` (``env_id`` ``i``)
    comes from ``envs[i]``, which resets on its own after its ``LAST`` step."""

    def __init__(self, envs: Sequence[AlfEnvironment]) -> None:
        """Wraps ``envs``.

        Raises:
            ValueError: if ``envs`` is empty, a member is batched or tensor-based, or a
                member's spec differs from ``envs[0]``'s (naming the member and the spec).
        """
        self._envs: List[AlfEnvironment] = list(envs)
        if not self._envs:
            raise ValueError("envs: expected at least one environment, got none")
        for i, env in enumerate(self._envs):
            if env.batched:
                raise ValueError(f"envs[{i}] is batched (batch_size={env.batch_size}); "
                                 f"expected unbatched environments")
            if getattr(env, "is_tensor_based", False):
                raise ValueError(f"envs[{i}] returns torch tensors; expected numpy "
                                 f"array based environments")
        specs = BatchSpecs.of(self._envs[0], len(self._envs))
        for i, env in enumerate(self._envs[1:], start=1):
            for name, spec, other in zip(SPEC_METHODS, specs, BatchSpecs.of(env, 1)):
                difference = _spec_difference(spec, other)
                if difference:
                    raise ValueError(f"envs[{i}].{name}() differs from envs[0].{name}(): "
                                     f"{difference}")
        super().__init__(specs)
        self._env_ids = np.arange(len(self._envs), dtype=np.int32)

    @property
    def envs(self) -> List[AlfEnvironment]:
        """The member environments."""
        return self._envs

    def seed(self, seed: int) -> None:
        """Seeds member ``i`` with ``seed * n + i`` (n = number of members)."""
        n = len(self._envs)
        for i, env in enumerate(self._envs):
            env.seed(seed * n + i)

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders member 0."""
        return self._envs[0].render(mode)

    def sync_progress(self, progress: Any = None) -> None:
        """Forwards ``progress`` to every member."""
        for env in self._envs:
            env.sync_progress(progress)

    def _close(self) -> None:
        for env in self._envs:
            env.close()

    def _batch(self, time_steps: List[TimeStep]) -> TimeStep:
        batched: TimeStep = nest.map_structure(lambda *xs: np.stack(xs), *time_steps)
        return batched._replace(env_id=self._env_ids.copy())

    def _reset(self) -> TimeStep:
        return self._batch([env.reset() for env in self._envs])

    def _step(self, action: Any) -> TimeStep:
        n = len(self._envs)

        def check(path: str, leaf: Any) -> Any:
            if np.shape(leaf)[:1] != (n, ):
                raise ValueError(f"{nest.field_name('action', path)}: expected a leading batch "
                                 f"dimension of {n}, got shape {tuple(np.shape(leaf))}")
            return leaf

        nest.map_structure_with_path(check, action)
        leaves = nest.flatten(action)
        return self._batch([
            env.step(nest.pack_sequence_as(action, [a[i] for a in leaves]))
            for i, env in enumerate(self._envs)
        ])


def _spec_difference(expected: Any, got: Any) -> str:
    """Describes the first difference between two spec nests ("" if equal)."""
    try:
        nest.assert_same_structure(expected, got)
    except nest.NestStructureError as err:
        return str(err)
    for (path, a), b in zip(nest.flatten_with_path(expected), nest.flatten(got)):
        if a != b:
            where = f"at '{path}'" if path else "at the root"
            return f"{where} expected {a!r}, got {b!r}"
    return ""
