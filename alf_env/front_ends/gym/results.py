"""What the workers of a ``FastVectorEnv`` return: pipe reports, and batches from the rows.

**The pipe** carries what has no fixed size, only when there is some:

* info values of no fixed size (str, None, nested dicts; in SAME_STEP mode
  ``final_obs`` and ``final_info`` at an episode's end), the signature of a
  new info layout (once per layout and worker), and whole infos that do not
  fit the info area; an empty info costs nothing;
* observation leaves of spaces with no fixed size (Graph, Sequence, custom
  spaces): they are pickled every step, so such spaces cost a pipe message
  per worker per step (about what ``AsyncVectorEnv`` pays for everything);
* reset arguments other than the default (seeds, options, ``reset_mask``):
  one pipe call per worker before the RESET job;
* ``call`` / ``get_attr`` / ``set_attr`` / ``render``, and errors with their
  worker tracebacks.

A worker sends at most one report per job; the parent reads it as soon as it
sees the job finish (``ProcessEnvironment.pending_report``, through
:meth:`ResultAssembly._collect_reports`, the ``on_ok`` hook of the
:class:`~alf_env.data_plane.job_board.JobBoard`), so the pipe never gets out
of step. The rows and the reports then make the batch: the observations
(:class:`~alf_env.front_ends.gym.space_layout.SpaceLayout`) and the batched infos
(:class:`~alf_env.front_ends.gym.info_codec.InfoDecoder`).
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from gymnasium.vector import AutoresetMode

from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.data_plane.shared_block import JobType
from alf_env.front_ends.gym.info_codec import InfoDecoder, Payload

__all__ = ["ResultAssembly"]


class ResultAssembly:
    """Reading the workers' reports and batching observations and infos (a mixin of
    ``FastVectorEnv``).

    It reads the env's ``_board``, ``_workers``, ``_bounds``, the row views
    (``_obs_views``, ``_report``), ``_obs``, ``_info_decoder``, ``copy``,
    ``num_envs`` and the row indexes of every env (``_all_rows``,
    ``_all_row_list``), and keeps the pipe parts of the last results in
    ``_payloads`` (env id -> info payload) and ``_pipe_leaves`` (env id -> its
    pipe observation leaves), and in the DISABLED mode (``autoreset_mode``)
    ``_needs_reset`` (the envs that ended).
    """

    _board: Any  # a JobBoard, or a PipeBoard on the pipe path (None once closed)
    _workers: List[ProcessEnvironment]
    _bounds: List[Tuple[int, int]]
    _obs: Any  # a SpaceLayout, or a PipeLayout on the pipe path
    _obs_views: Any  # the observation rows (EnvRows.obs or PipeRows.obs)
    _report: np.ndarray
    _reward: np.ndarray
    _terminated: np.ndarray
    _truncated: np.ndarray
    _info_decoder: InfoDecoder
    copy: bool
    num_envs: int
    autoreset_mode: AutoresetMode
    _all_rows: slice
    _all_row_list: List[int]
    _payloads: Dict[int, Payload]
    _pipe_leaves: Dict[int, List[Any]]
    _needs_reset: np.ndarray

    def _collect_reports(self, workers: List[int]) -> Dict[int, BaseException]:
        """Reads the pipe reports of finished STEP/RESET jobs (JobBoard's on_ok hook).

        Returns:
            what reading a worker's report raised (e.g. the worker died), by worker.
        """
        errors: Dict[int, BaseException] = {}
        if not self._payloads and not np.count_nonzero(self._report):
            return errors  # the hot path: nobody reported anything (count_nonzero: 5x any())
        promises = {}
        for worker in workers:
            job = self._board.job_of(worker)
            if job is not JobType.STEP and job is not JobType.RESET:
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

    def _gather_all(self, info_rows: List[int]) -> Tuple[Any, Dict[str, Any]]:
        """Observations of every env (synchronous mode) and the infos of ``info_rows``."""
        rows = self._all_row_list
        obs = self._obs.read_rows(self._obs_views, self._all_rows, rows,
                                  self._pipe_rows(rows), self.copy)
        if len(info_rows) == self.num_envs:
            infos = self._info_decoder.batch(self._all_rows, rows, self._payloads_of(rows))
        else:  # some envs were reset (reset_mask): their infos at their own positions
            infos = self._info_decoder.batch(self._all_rows, rows, self._payloads_of(rows),
                                             include=info_rows)
        return obs, infos

    def _step_results(self) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """The 5-tuple of a synchronous step: every row, copies of the whole views."""
        obs, infos = self._gather_all(self._all_row_list)
        terminated, truncated = self._terminated.copy(), self._truncated.copy()
        if self.autoreset_mode is AutoresetMode.DISABLED:
            np.logical_or(terminated, truncated, out=self._needs_reset)
        return obs, self._reward.copy(), terminated, truncated, infos

    def _payloads_of(self, row_list: List[int]) -> Dict[int, Payload]:
        """The pipe payloads of the infos of ``row_list`` (most steps: none)."""
        if not self._payloads:
            return {}
        return {row: self._payloads[row] for row in row_list if row in self._payloads}

    def _pipe_rows(self, row_list: List[int]) -> Optional[List[List[Any]]]:
        if not self._obs.num_pipe_leaves:
            return None
        return [self._pipe_leaves[row] for row in row_list]
