"""What the workers of a ``FastVectorEnv`` return: pipe reports, and batches from the rows.

A worker sends at most one report per job and the parent reads it as soon as it
sees the job finish (the ``JobBoard``'s ``on_ok`` hook), so the pipe never gets out
of step. What takes the pipe: ``docs/architecture.rst`` ("Data plane").
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from gymnasium.vector import AutoresetMode

from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.restart import RESTARTED_INFO_KEY
from alf_env.data_plane.shared_block import JobType
from alf_env.front_ends.gym.gym_rows import EnvRows
from alf_env.front_ends.gym.info_codec import InfoDecoder, Payload
from alf_env.front_ends.gym.info_layout import Signature
from alf_env.front_ends.gym.pipe_path import PipeRows, RowLayout
from alf_env.front_ends.gym.space_layout import Rows
from alf_env.front_ends.gym.state import Step

__all__ = ["ENV_ID_DTYPE", "ResultRows", "ResultAssembler", "worker_of_rows"]

#: dtype of ``info["env_id"]`` in the asynchronous mode (EnvPool's).
ENV_ID_DTYPE = np.int32


#: The rows of the results, one per env: the shared block's views or the pipe path's.
ResultRows = Union[EnvRows, PipeRows]


def worker_of_rows(bounds: Sequence[Tuple[int, int]]) -> np.ndarray:
    return np.concatenate([np.full(end - begin, w, dtype=np.int64)
                           for w, (begin, end) in enumerate(bounds)])


class ResultAssembler:
    """Reads the workers' reports and batches observations and infos from the rows; it owns
    the pipe parts of the last results and, under DISABLED autoreset, which envs ended."""

    def __init__(self, rows: ResultRows, observation: RowLayout, copy: bool,
                 workers: Sequence[ProcessEnvironment], bounds: Sequence[Tuple[int, int]],
                 autoreset_mode: AutoresetMode, declared_infos: Sequence[Signature] = (),
                 payloads: Optional[Dict[int, Payload]] = None, batch_infos: bool = True) -> None:
        num_envs = bounds[-1][1]
        self._obs, self._obs_views = observation, rows.obs
        self._reward, self._terminated = rows.reward, rows.terminated
        self._truncated, self._report = rows.truncated, rows.report
        self._workers = workers
        self._bounds = bounds
        self._copy = copy
        self.refuses_ended = autoreset_mode is AutoresetMode.DISABLED
        self._num_envs = num_envs
        self._all_rows = slice(0, num_envs)
        self._all_row_list = list(range(num_envs))
        # gather_all's read of every observation, when they are one field (else None).
        self._read_all_obs = observation.batch_reader(rows.obs, self._all_rows, copy)
        row_worker = worker_of_rows(bounds)
        info_view = rows.info if rows.info is not None else np.zeros((num_envs, 0), np.uint8)
        self._info_decoder = InfoDecoder(info_view, rows.info_layout, row_worker, len(bounds))
        for w in range(len(bounds)):
            for lid, signature in enumerate(declared_infos, start=1):
                self._info_decoder.register(w, lid, signature)
        self._payloads: Dict[int, Payload] = {} if payloads is None else payloads
        self._pipe_leaves: Dict[int, List[Any]] = {}
        self._needs_reset = np.zeros(num_envs, dtype=np.bool_)
        self._infos_of = self._info_decoder.batch if batch_infos else self._info_decoder.each

    def collect_reports(self, workers: List[int],
                        jobs: Mapping[int, JobType]) -> Dict[int, BaseException]:
        """Reads the pipe reports of the STEP/RESET jobs of ``workers`` that finished OK;
        returns what reading a worker's report raised (e.g. it died), by worker."""
        errors: Dict[int, BaseException] = {}
        if not self._payloads and not np.count_nonzero(self._report):
            return errors  # the hot path: nobody reported anything (count_nonzero: 5x any())
        promises = {}
        for worker in workers:
            if jobs.get(worker) not in (JobType.STEP, JobType.RESET):
                continue
            begin, end = self._bounds[worker]
            for row in range(begin, end):
                self._payloads.pop(row, None)
            if self._report[begin:end].any():
                # Every report's place on its pipe is taken before any is read,
                # so an interrupted read leaves no pipe out of step.
                try:
                    promises[worker] = self._workers[worker].pending_report()
                except Exception as exc:  # noqa: BLE001 -- e.g. known to be dead
                    errors[worker] = exc
        for worker, promise in promises.items():
            begin = self._bounds[worker][0]
            try:
                report, new_layouts = promise()
            except Exception as exc:  # noqa: BLE001 -- raised by the board's waits
                errors[worker] = exc
                continue
            for layout_id, signature in new_layouts:
                self._info_decoder.register(worker, layout_id, signature)
            for k, (payload, leaves) in report.items():
                if payload is not None:
                    self._payloads[begin + k] = payload
                if leaves:
                    self._pipe_leaves[begin + k] = leaves
        return errors

    def gather_all(self, info_rows: List[int]) -> Tuple[Any, Any]:
        """Observations of every env (synchronous mode) and the infos of ``info_rows``
        (batched, or with ``batch_infos=False`` a list of each env's info dict)."""
        rows = self._all_row_list
        read_all_obs = self._read_all_obs  # one array field: one copy
        obs = (read_all_obs() if read_all_obs is not None else self._obs.read_rows(
            self._obs_views, self._all_rows, rows, self._pipe_rows(rows), self._copy))
        # Some envs were reset (reset_mask): only theirs, at their own positions.
        include = None if len(info_rows) == self._num_envs else info_rows
        infos = self._infos_of(self._all_rows, rows, self._payloads_of(rows), include)
        return obs, infos

    def step_results(self) -> Step:
        """The 5-tuple of a synchronous step: every row, copies of the whole views."""
        obs, infos = self.gather_all(self._all_row_list)
        terminated, truncated = self._terminated.copy(), self._truncated.copy()
        if self.refuses_ended:
            np.logical_or(terminated, truncated, out=self._needs_reset)
        return obs, self._reward.copy(), terminated, truncated, infos

    def batch_of(self, workers: Sequence[int]) -> Tuple[Step, np.ndarray, Rows]:
        """The 5-tuple of the envs of ``workers``, in that order, with ``info["env_id"]``
        (the asynchronous mode's ``recv``); also their ids and rows."""
        bounds = self._bounds
        row_list = [i for w in workers for i in range(*bounds[w])]
        ids = np.asarray(row_list, dtype=np.int64)
        if all(bounds[a][1] == bounds[b][0] for a, b in zip(workers, workers[1:])):
            # Rows back to back (e.g. one worker's): a slice reads them faster,
            # and the info decoder remembers the slices it has seen.
            rows: Rows = slice(row_list[0], row_list[-1] + 1)
            terminated, truncated = self._terminated[rows].copy(), self._truncated[rows].copy()
            reward = self._reward[rows].copy()
        else:
            rows = ids
            terminated, truncated, reward = (self._terminated[ids], self._truncated[ids],
                                             self._reward[ids])
        obs = self._obs.read_rows(self._obs_views, rows, row_list, self._pipe_rows(row_list))
        infos = self._info_decoder.batch(rows, row_list, self._payloads_of(row_list))
        infos["env_id"] = ids.astype(ENV_ID_DTYPE)
        if self.refuses_ended:
            self._needs_reset[rows] = terminated | truncated
        return (obs, reward, terminated, truncated, infos), ids, rows

    def write_restarted(self, row: int, obs: Any, info: Dict[str, Any]) -> None:
        """Writes the results of env ``row`` whose worker was restarted: its new first
        observation, truncated, its flagged reset info a pipe payload (which the next
        finished job of its worker drops); ``ValueError`` if the observation does not fit."""
        leaves = self._obs.write_row(self._obs_views, row, obs)
        if leaves:
            self._pipe_leaves[row] = leaves
        self._reward[row] = 0.0
        self._terminated[row] = False
        self._truncated[row] = True
        self._report[row] = False
        self._payloads[row] = {**info, RESTARTED_INFO_KEY: True}

    def check_not_ended(self, ids: np.ndarray) -> None:
        """Raises gymnasium's ``AssertionError`` if an env of ``ids`` ended (DISABLED)."""
        if self.refuses_ended and self._needs_reset[ids].any():
            ended = ids[self._needs_reset[ids]].tolist()
            raise AssertionError(
                f"envs {ended} ended (terminated or truncated) and autoreset_mode is "
                f"DISABLED: reset them first, e.g. reset(options={{'reset_mask': mask}})")

    def forget_ended(self, mask: Optional[np.ndarray] = None) -> None:
        """The envs of ``mask`` (default: every env) are being reset."""
        self._needs_reset[slice(None) if mask is None else mask] = False

    def _payloads_of(self, row_list: List[int]) -> Dict[int, Payload]:
        if not self._payloads:
            return {}
        return {row: self._payloads[row] for row in row_list if row in self._payloads}

    def _pipe_rows(self, row_list: List[int]) -> Optional[List[List[Any]]]:
        return [self._pipe_leaves[row] for row in row_list] if self._obs.num_pipe_leaves else None
