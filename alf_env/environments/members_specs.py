"""Spec accessors answered from specs cached once: :class:`MembersSpecs`.

An environment that batches member environments with identical specs
(``BatchEnvironmentWrapper``, ``EnvGroup``, ``ParallelAlfEnvironment`` and
``FastParallelEnvironment``, ``RayParallelAlfEnvironment``) asks one member
for its specs when it is made and answers the five spec accessors from them;
:func:`check_same_specs` names the first member whose specs differ.
"""

from typing import Any, Sequence

from alf_env.data_structures import TimeStep

__all__ = ["SPEC_METHODS", "MembersSpecs", "check_same_specs"]

# The spec accessors of an AlfEnvironment, in the order they are asked.
SPEC_METHODS = ("observation_spec", "action_spec", "reward_spec", "env_info_spec",
                "time_step_spec")


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
        self._observation_spec = member.observation_spec()
        self._action_spec = member.action_spec()
        self._reward_spec = member.reward_spec()
        self._env_info_spec = member.env_info_spec()
        self._time_step_spec = member.time_step_spec()

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


def check_same_specs(members: Sequence[Any], names: Sequence[str], label: str) -> None:
    """Raises ``ValueError`` naming the first member whose specs differ from member 0's.

    Args:
        members: envs (or ``ProcessEnvironment``s) meant to form one batch.
        names: the accessors (called) and properties (read) to compare.
        label: what a member is called in the error, e.g. ``"env"``.
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
