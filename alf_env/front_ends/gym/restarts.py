"""Restarting a dead worker of a ``FastVectorEnv`` (``restart_policy``).

:meth:`WorkerRestarter.restart` is the board's death hook: only a wait's death
branch calls it, so a policy costs a step nothing. ``docs/simulators.rst``
("Restarting workers that die").
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import gymnasium as gym

from alf_env.control_plane.affinity import pin_workers
from alf_env.control_plane.launch import close_all
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RestartBudget, describe_death
from alf_env.data_plane.job_board import PIPE_CALL
from alf_env.front_ends.gym.gym_rows import RESET_DEFAULT
from alf_env.front_ends.gym.results import ResultAssembler

__all__ = ["WorkerRestarter"]


class WorkerRestarter:
    """Replaces the dead workers of one ``FastVectorEnv`` under its budget, in
    ``workers``, the list its board, engine and results share."""

    def __init__(self, budget: RestartBudget, workers: List[ProcessEnvironment],
                 bounds: Sequence[Tuple[int, int]],
                 make_worker: Callable[[int], ProcessEnvironment],
                 each_env: Sequence[Tuple[gym.Space[Any], gym.Space[Any]]],
                 rejoin: Callable[[int, ProcessEnvironment], None],
                 results: ResultAssembler, cpus: Optional[Sequence[int]] = None) -> None:
        self._budget = budget
        self._workers = workers
        self._bounds = bounds
        self._make_worker = make_worker
        self._each_env = list(each_env)
        self._rejoin = rejoin
        self._results = results
        self._cpus = cpus

    def restart(self, worker: int, error: BaseException, during: str) -> bool:
        """Restarts ``worker``, dead with ``error``; ``False`` if the budget is spent or the
        death came during a pipe request (which raises as without a policy). Raises
        ``error`` when the new worker failed (which counts)."""
        if during == PIPE_CALL or not self._budget.allows(worker):
            return False
        begin, end = self._bounds[worker]
        self._budget.spend(worker, list(range(begin, end)), describe_death(error))
        old = self._workers[worker]
        old.stop_job_loop()
        close_all([old], polite_timeout=0.0)
        new = self._make_worker(worker)
        try:
            timeout = self._budget.start_timeout
            new.start(wait_to_start=False)
            new.wait_start(timeout)
            if self._cpus is not None and new.pid is not None:
                pin_workers([new.pid], [self._cpus[worker]])
            for env, (obs, act) in enumerate(new.call("describe")(timeout), start=begin):
                old_obs, old_act = self._each_env[env]
                if obs != old_obs or act != old_act:
                    raise RuntimeError(
                        f"env {env} was restarted with other spaces: observation space "
                        f"{obs} and action space {act}, expected {old_obs} and {old_act}")
            answers: List[Any] = new.call("reset", RESET_DEFAULT)(timeout)
            for row, (obs, _, _, _, info) in enumerate(answers, start=begin):
                self._results.write_restarted(row, obs, info)
            self._workers[worker] = new  # the board's, engine's and results' list too
            self._rejoin(worker, new)
        except BaseException as exc:
            close_all([new], polite_timeout=0.0)
            raise error from exc
        return True
