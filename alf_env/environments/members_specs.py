"""The specs of a batch of member envs, asked of one member once, when the batch is made:
:class:`BatchSpecs`, answered by a :class:`BatchedEnvironment`; :func:`check_same_specs`
names the first member whose specs differ."""

from typing import Any, NamedTuple, Sequence

from alf_env.data_structures import TimeStep
from alf_env.environments.alf_environment import AlfEnvironment

__all__ = ["SPEC_METHODS", "SAME_SPECS", "BatchSpecs", "BatchedEnvironment", "check_same_specs"]

SPEC_METHODS = ("observation_spec", "action_spec", "reward_spec", "env_info_spec",
                "time_step_spec")

# What the members of one batch must agree on (their time step specs follow).
SAME_SPECS = SPEC_METHODS[:4] + ("batched", "batch_size")


class BatchSpecs(NamedTuple):
    """The specs every member of one batch has, and the rows they are answered for."""
    observation: Any
    action: Any
    reward: Any
    env_info: Any
    time_step: TimeStep
    batch_size: int

    @classmethod
    def of(cls, member: Any, batch_size: int) -> "BatchSpecs":
        """``member``'s specs (an env or a ``ProcessEnvironment``), for ``batch_size`` rows."""
        return cls(member.observation_spec(), member.action_spec(), member.reward_spec(),
                   member.env_info_spec(), member.time_step_spec(), batch_size)


class BatchedEnvironment(AlfEnvironment):
    """A batched ``AlfEnvironment`` whose specs (of one row) and batch size are one
    :class:`BatchSpecs`; a subclass steps, seeds and closes its members itself."""

    def __init__(self, specs: BatchSpecs) -> None:
        super().__init__()
        self.__specs = specs

    def observation_spec(self) -> Any:
        return self.__specs.observation

    def action_spec(self) -> Any:
        return self.__specs.action

    def reward_spec(self) -> Any:
        return self.__specs.reward

    def env_info_spec(self) -> Any:
        return self.__specs.env_info

    def time_step_spec(self) -> TimeStep:
        return self.__specs.time_step

    @property
    def batched(self) -> bool:
        return True

    @property
    def batch_size(self) -> int:
        return self.__specs.batch_size


def check_same_specs(members: Sequence[Any], names: Sequence[str] = SAME_SPECS,
                     label: str = "env") -> None:
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
                raise ValueError(f"{label} {i}: {name} is {got!r}, but {label} 0 has "
                                 f"{expected!r}; all envs of one batch must have identical specs")


def _spec_attr(member: Any, name: str) -> Any:
    value = getattr(member, name)
    return value() if callable(value) else value
