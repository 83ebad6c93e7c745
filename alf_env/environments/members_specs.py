"""The specs of a batch of member envs: :class:`BatchSpecs`, owned by a :class:`BatchedEnvironment`.

An environment that batches members with identical specs
(``BatchEnvironmentWrapper``, ``AlfEnvBatch``, ``RayParallelAlfEnvironment``,
and ``ParallelAlfEnvironment`` / ``FastParallelEnvironment`` through
``WorkersEnvironment``) asks one member for its specs once, when it is made,
and passes them with its batch size to :class:`BatchedEnvironment`, which
answers the spec accessors, ``batched`` and ``batch_size`` from them;
:func:`check_same_specs` names the first member whose specs differ.
"""

from typing import Any, NamedTuple, Sequence

from alf_env.data_structures import TimeStep
from alf_env.environments.alf_environment import AlfEnvironment

__all__ = ["SPEC_METHODS", "SAME_SPECS", "BatchSpecs", "BatchedEnvironment",
           "check_same_specs"]

# The spec accessors of an AlfEnvironment, in the order they are asked.
SPEC_METHODS = ("observation_spec", "action_spec", "reward_spec", "env_info_spec",
                "time_step_spec")

# What the members of one batch must agree on by default (their time step
# specs follow from these).
SAME_SPECS = ("observation_spec", "action_spec", "reward_spec", "env_info_spec",
              "batched", "batch_size")


class BatchSpecs(NamedTuple):
    """The specs every member of one batch has (:data:`SPEC_METHODS` order), and
    the number of rows they are answered for (a member's or the batch's)."""
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
    """A batched ``AlfEnvironment`` whose specs and batch size are one :class:`BatchSpecs`.

    The spec accessors answer for one row, ``batched`` is ``True`` and
    ``batch_size`` is ``specs.batch_size``. A subclass passes the specs once
    its members are made and steps, seeds and closes them itself.

    Args:
        specs: the members' specs, with the batch's batch size.
    """

    def __init__(self, specs: BatchSpecs) -> None:
        super().__init__()
        self.__specs = specs

    def observation_spec(self) -> Any:
        """The members' observation spec."""
        return self.__specs.observation

    def action_spec(self) -> Any:
        """The members' action spec (of one row)."""
        return self.__specs.action

    def reward_spec(self) -> Any:
        """The members' reward spec."""
        return self.__specs.reward

    def env_info_spec(self) -> Any:
        """The members' env info spec."""
        return self.__specs.env_info

    def time_step_spec(self) -> TimeStep:
        """The members' time step spec (of one row)."""
        return self.__specs.time_step

    @property
    def batched(self) -> bool:
        """``True``: inputs and outputs have a leading batch dimension."""
        return True

    @property
    def batch_size(self) -> int:
        """The rows of a time step (``specs.batch_size``)."""
        return self.__specs.batch_size


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
