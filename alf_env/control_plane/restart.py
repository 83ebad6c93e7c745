"""Restarting dead workers: the policy a user gives, and the budget that enforces it.

One policy class serves every front end (the local ones, ``GymProxy`` and the
Ray ones), with one meaning: a worker (or Ray actor) that dies is replaced by a
new one built from the same env constructors, its envs are reset, and the call
that saw the death returns them as restarted. The front ends own how a worker
is replaced; :class:`RestartBudget` owns the count, the limit and the one log
line per restart. What a restarted env returns: ``docs/contract.rst``
("Restarts").
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

from absl import logging

from alf_env.errors import WorkerDiedError, describe_exit

__all__ = ["RestartPolicy", "RestartBudget", "RESTARTED_INFO_KEY", "describe_death"]

#: The info key (``True``) that flags an env whose worker was restarted.
RESTARTED_INFO_KEY = "env_restarted"


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """What to do when a worker process (or a Ray actor, or its node) dies, like
    RLlib's ``restart_failed_env_runners`` and ML-Agents' restarts of env workers.

    Without a policy (``restart_policy=None``, the default) a dead worker raises
    :class:`~alf_env.errors.WorkerDiedError` and the env is broken (only
    ``close()`` works). With one, the worker is started again with the same env
    constructors, its envs are reset, and the call that saw the death returns
    their first observations, flagged: ``info["env_restarted"]`` with
    ``truncated=True`` (gymnasium, SB3), a ``FIRST`` step (ALF).

    Attributes:
        max_restarts: restarts allowed per worker over the env's life
            (``None``: unlimited); past it the death is raised. A failed
            rebuild counts as a restart.
        start_timeout: seconds a new worker may take to start and build its
            envs; past it the death is raised (never a hang).
        actor_options: Ray front ends only: ``ray.remote`` options of recreated
            actors (``None``: those of the dead actor), e.g. without the node
            pin of an actor whose node is gone.
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
    """The restarts of each worker of one env, checked against its policy.

    Args:
        policy: the user's policy (``None``: no restarts).
        num_workers: how many workers (or actors) the env has.
    """

    def __init__(self, policy: Optional[RestartPolicy], num_workers: int) -> None:
        if policy is not None and not isinstance(policy, RestartPolicy):
            raise TypeError(f"restart_policy: expected None or a RestartPolicy, got "
                            f"{type(policy).__name__}")
        self.policy = policy
        #: Restarts so far, per worker (failed rebuilds included).
        self.counts: List[int] = [0] * num_workers

    @property
    def enabled(self) -> bool:
        """Whether any restart is possible (a policy was given)."""
        return self.policy is not None

    @property
    def start_timeout(self) -> float:
        """Seconds a new worker may take to start (the policy's)."""
        return (self.policy or RestartPolicy()).start_timeout

    def allows(self, worker: int) -> bool:
        """Whether ``worker`` may be restarted once more."""
        return self.policy is not None and self.policy.allows(self.counts[worker])

    def spend(self, worker: int, env_ids: Sequence[Any], cause: str) -> int:
        """Counts one restart of ``worker`` and logs it; returns its count.

        Call it before rebuilding, so that a rebuild that fails still counts.

        Args:
            env_ids: the ids of the envs the worker held.
            cause: why it died (a signal or an exit code, as
                :func:`describe_death` gives it).
        """
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
