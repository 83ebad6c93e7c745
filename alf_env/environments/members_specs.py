"""Spec accessors answered from specs cached once: :class:`MembersSpecs`.

An environment that batches member environments with identical specs
(``BatchEnvironmentWrapper``, ``AlfEnvBatch``, ``RayParallelAlfEnvironment``)
asks one member for its specs when it is made and answers the five spec
accessors from them; :func:`check_same_specs` names the first member whose
specs differ (also for ``ParallelAlfEnvironment`` and
``FastParallelEnvironment``, which keep their workers' specs in an
``AlfWorkers``: ``front_ends/alf/workers.py``).
"""

from typing import Any, Sequence, Tuple

from alf_env.data_structures import TimeStep

__all__ = ["SPEC_METHODS", "SAME_SPECS", "MembersSpecs", "spec_values", "check_same_specs"]

# The spec accessors of an AlfEnvironment, in the order they are asked.
SPEC_METHODS = ("observation_spec", "action_spec", "reward_spec", "env_info_spec",
                "time_step_spec")

# What the members of one batch must agree on by default (their time step
# specs follow from these).
SAME_SPECS = ("observation_spec", "action_spec", "reward_spec", "env_info_spec",
              "batched", "batch_size")


class MembersSpecs:
    """The spec accessors of an env that batches members with identical specs.

    The specs are kept in ``_observation_spec``, ``_action_spec``,
    ``_reward_spec``, ``_env_info_spec`` and ``_time_step_spec``:
    :meth:`_cache_specs` asks a member for them, or a subclass sets them itself.
    """

    _observation_spec: Any
    _action_spec: Any
    _reward_spec: Any
    _env_info_spec: Any
    _time_step_spec: TimeStep

    def _cache_specs(self, member: Any) -> None:
        """Asks ``member`` for its specs (in :data:`SPEC_METHODS` order) and keeps them.

        Args:
            member: an env (or a ``ProcessEnvironment``) with the five spec
                accessors.
        """
        self._keep_specs(spec_values(member))

    def _keep_specs(self, values: Sequence[Any]) -> None:
        """Keeps the five specs, given in :data:`SPEC_METHODS` order
        (:func:`spec_values` of a member, e.g. one in another process)."""
        (self._observation_spec, self._action_spec, self._reward_spec,
         self._env_info_spec, self._time_step_spec) = values

    def observation_spec(self) -> Any:
        """The members' observation spec."""
        return self._observation_spec

    def action_spec(self) -> Any:
        """The members' action spec."""
        return self._action_spec

    def reward_spec(self) -> Any:
        """The members' reward spec."""
        return self._reward_spec

    def env_info_spec(self) -> Any:
        """The members' env info spec."""
        return self._env_info_spec

    def time_step_spec(self) -> TimeStep:
        """The members' time step spec."""
        return self._time_step_spec


def spec_values(member: Any) -> Tuple[Any, ...]:
    """The five specs of ``member``, in :data:`SPEC_METHODS` order.

    Args:
        member: an env (or a ``ProcessEnvironment``) with the five spec
            accessors.
    """
    return tuple(getattr(member, name)() for name in SPEC_METHODS)


def check_same_specs(members: Sequence[Any], names: Sequence[str] = SAME_SPECS,
                     label: str = "env") -> None:
    """Raises ``ValueError`` naming the first member whose specs differ from member 0's.

    Args:
        members: envs (or ``ProcessEnvironment``s) meant to form one batch.
        names: the accessors (called) and properties (read) to compare.
        label: what a member is called in the error, e.g. ``"env"``.

    Raises:
        ValueError: naming the member, the spec, its value and member 0's.
    """
    first = members[0]
    for i, member in enumerate(members[1:], start=1):
        for name in names:
            expected, got = _spec_attr(first, name), _spec_attr(member, name)
            if expected != got:
                raise ValueError(
                    f"{label} {i}: {name} is {got!r}, but {label} 0 has {expected!r}; "
                    f"all envs of one batch must have identical specs")


def _spec_attr(member: Any, name: str) -> Any:
    value = getattr(member, name)
    return value() if callable(value) else value
