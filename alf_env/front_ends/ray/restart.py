"""ActorDiedError, and the one :class:`RestartPolicy` of every front end, re-exported."""

from typing import Any, Sequence, Tuple

from alf_env.control_plane.restart import RestartPolicy
from alf_env.errors import WorkerDiedError

__all__ = ["RestartPolicy", "ActorDiedError"]


class ActorDiedError(WorkerDiedError):
    """A Ray actor that hosted envs died (killed, crashed, or its node is gone): its
    ``env_ids``, ``actor_index``, ``node`` (IP address, if known) and Ray's ``reason``."""

    def __init__(self, env_ids: Sequence[int], actor_index: int, node: str = "",
                 reason: str = "", during: str = "") -> None:
        env_ids = list(env_ids)
        super().__init__(env_ids[0] if env_ids else None, None, during)
        where = f" during {during}" if during else ""
        on = f" on node {node}" if node else ""
        self.args = (f"Ray actor {actor_index}{on}, which held envs {env_ids}, "
                     f"died{where}: {reason or 'no reason given'}",)
        self.env_ids, self.actor_index, self.node, self.reason = env_ids, actor_index, node, reason

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.env_ids, self.actor_index, self.node, self.reason, self.during))
