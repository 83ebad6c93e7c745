"""The restart policy for dead actors and the error raised when there is none."""

import dataclasses
from typing import Any, Dict, Optional, Sequence

from alf_env.errors import WorkerDiedError


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """What to do when an actor (or its node) dies, like RLlib's
    ``restart_failed_env_runners``.

    Without a policy (``restart_policy=None``) a dead actor raises
    :class:`ActorDiedError` and the env is broken (only ``close()`` works).
    With one, the actor is recreated with the same env constructors (Ray
    places it on any node that fits ``actor_options``), its envs are reset,
    and the call that saw the death returns their first observations,
    flagged (``info["env_restarted"]`` for ``RayVectorEnv``, a ``FIRST``
    step for ``RayParallelAlfEnvironment``).

    Attributes:
        max_restarts: restarts allowed per actor over the env's life
            (``None``: unlimited); past it the death is raised.
        start_timeout: seconds a recreated actor may take to be placed and to
            build its envs; past it the death is raised (never a hang).
        actor_options: ``ray.remote`` options of recreated actors (``None``:
            those of the dead actor), e.g. without the node pin of an actor
            whose node is gone.
    """
    max_restarts: Optional[int] = 3
    start_timeout: float = 120.0
    actor_options: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        if self.max_restarts is not None and self.max_restarts < 0:
            raise ValueError(f"RestartPolicy.max_restarts: expected None or >= 0, got "
                             f"{self.max_restarts}")
        if not self.start_timeout > 0:
            raise ValueError(f"RestartPolicy.start_timeout: expected a positive number of "
                             f"seconds, got {self.start_timeout}")

    def allows(self, restarts_so_far: int) -> bool:
        """Whether an actor restarted ``restarts_so_far`` times may restart again."""
        return self.max_restarts is None or restarts_so_far < self.max_restarts


class ActorDiedError(WorkerDiedError):
    """A Ray actor that hosted envs died (killed, crashed, or its node is gone).

    Attributes:
        env_ids: the ids of every env the actor held.
        actor_index: which actor of the env it was.
        node: the node it ran on (IP address), if known.
        reason: Ray's account of the death.
    """

    def __init__(self, env_ids: Sequence[int], actor_index: int, node: str = "",
                 reason: str = "", during: str = "") -> None:
        env_ids = list(env_ids)
        super().__init__(env_ids[0] if env_ids else None, None, during)
        where = f" during {during}" if during else ""
        on = f" on node {node}" if node else ""
        self.args = (f"Ray actor {actor_index}{on}, which held envs {env_ids}, "
                     f"died{where}: {reason or 'no reason given'}",)
        self.env_ids = env_ids
        self.actor_index = actor_index
        self.node = node
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.env_ids, self.actor_index, self.node, self.reason,
                             self.during))
