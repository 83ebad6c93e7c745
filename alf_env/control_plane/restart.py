"""Restarting dead workers: the user's policy (one for every front end) and its budget.
What a restarted env returns: docs/contract.rst, "Restarts"."""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

from absl import logging

from alf_env.errors import WorkerDiedError, describe_exit

__all__ = ["RestartPolicy", "RestartBudget", "RESTARTED_INFO_KEY", "describe_death"]

#: The info key (``True``) that flags an env whose worker was restarted.
RESTARTED_INFO_KEY = "env_restarted"


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """Restart a worker process (or a Ray actor) that dies (docs/contract.rst, "Restarts").

    Attributes:
        max_restarts: restarts allowed per worker over the env's life (``None``: unlimited).
        start_timeout: seconds a new worker may take to start and build its envs.
        actor_options: Ray only: ``ray.remote`` options of recreated actors
            (``None``: the dead actor's), e.g. without the pin to a lost node.
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
        """Whether a worker restarted ``restarts_so_far`` times may restart again."""
        return self.max_restarts is None or restarts_so_far < self.max_restarts


class RestartBudget:
    """The restarts of each worker (or actor) of one env, against its ``policy`` (or none)."""

    def __init__(self, policy: Optional[RestartPolicy], num_workers: int) -> None:
        if policy is not None and not isinstance(policy, RestartPolicy):
            raise TypeError(f"restart_policy: expected None or a RestartPolicy, got "
                            f"{type(policy).__name__}")
        self.policy = policy
        self.counts: List[int] = [0] * num_workers

    @property
    def enabled(self) -> bool:
        """Whether a policy was given."""
        return self.policy is not None

    @property
    def start_timeout(self) -> float:
        """The policy's ``start_timeout``."""
        return (self.policy or RestartPolicy()).start_timeout

    def allows(self, worker: int) -> bool:
        """Whether ``worker`` may be restarted once more."""
        return self.policy is not None and self.policy.allows(self.counts[worker])

    def spend(self, worker: int, env_ids: Sequence[Any], cause: str) -> int:
        """Counts a restart before the rebuild (a failed one counts), logs it, returns the count."""
        self.counts[worker] += 1
        limit = self.policy.max_restarts if self.policy is not None else 0
        of = "" if limit is None else f" of {limit}"
        logging.warning("envs %s (worker %d) died: %s; restarting them (restart %d%s)",
                        list(env_ids), worker, cause, self.counts[worker], of)
        return self.counts[worker]


def describe_death(error: BaseException) -> str:
    """The cause of a worker's death for a log line: its signal or exit code."""
    if isinstance(error, WorkerDiedError):
        return describe_exit(error.exitcode)
    return f"{type(error).__name__}: {error}"
