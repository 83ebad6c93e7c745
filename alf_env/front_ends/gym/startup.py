"""Starting a ``FastVectorEnv``: the plan of its workers, the workers and its shared rows.

**Processes.** Worker ``w`` is a ``ProcessEnvironment(fast=True)`` hosting an
:class:`~alf_env.data_plane.gym_rows.EnvGroup` of consecutive envs
(:func:`plan_workers`). By default there are as many workers as CPUs this
process may use (``num_workers``), the envs spread over them as evenly as
possible (EnvPool's ``num_threads``); ``envs_per_worker=1`` gives one process
per env. Once every worker is up and the spaces are checked, each enters the
native job loop with a :class:`~alf_env.data_plane.gym_rows.GymRowsHandler`;
the pipe is then reached through CALL jobs (the doorbell of
:class:`~alf_env.data_plane.job_board.JobBoard`).

**Shared memory** (one ``SharedBlock``, one row per env) holds every
fixed-size datum of the hot path:

* the action fields and the observation fields (see
  :mod:`alf_env.data_plane.space_layout`: Box, Discrete, MultiDiscrete, MultiBinary,
  Text, Tuple, Dict and OneOf map to fields);
* ``reward`` (float64, like gymnasium), ``terminated``, ``truncated``;
* ``report``: "this env has an entry in its worker's pipe report";
* ``info`` (``info_bytes`` per env) and ``info_layout``: the fixed-size
  values of the env's info dict (numbers, numeric arrays) and the id of
  their layout, learned from what the envs return (see
  :mod:`alf_env.data_plane.info_codec`): an env whose info keeps its keys and types
  costs no pipe message.

This module holds the checks of the constructor's arguments
(:func:`check_arguments`, :func:`plan_workers`, :func:`declared_infos`) and
:class:`WorkerStartup`, the start-up steps ``FastVectorEnv.__init__`` runs.
"""

import functools
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from alf_env.control_plane.affinity import usable_cpus
from alf_env.control_plane.group import start_environments
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.protocol import START_METHODS
from alf_env.data_plane.gym_rows import EnvGroup, EnvRows, GymRowsHandler, block_fields
from alf_env.data_plane.info_codec import InfoDecoder, InfoLayout, signature_of
from alf_env.data_plane.job_board import JobBoard
from alf_env.data_plane.job_loop import FastLoopSpec
from alf_env.data_plane.shared_block import SharedBlock
from alf_env.data_plane.space_layout import SpaceLayout

__all__ = ["check_arguments", "plan_workers", "declared_infos", "WorkerStartup"]


def check_arguments(env_fns: List[Any], batch_size: int, context: str,
                    autoreset_mode: AutoresetMode) -> None:
    """Raises ValueError/TypeError for arguments FastVectorEnv cannot work with."""
    n, b = len(env_fns), batch_size
    if n == 0:
        raise ValueError("env_fns: expected at least one env constructor, got none")
    for i, fn in enumerate(env_fns):
        if not callable(fn):
            raise TypeError(f"env_fns[{i}]: expected a callable returning a "
                            f"gymnasium.Env, got {type(fn).__name__}")
    if context not in START_METHODS:
        raise ValueError(f"context: expected one of {START_METHODS}, got {context!r}")
    if not 1 <= b <= n:
        raise ValueError(f"batch_size: expected 1 <= batch_size <= {n} (the number "
                         f"of envs), got {b}")
    if b < n and autoreset_mode is AutoresetMode.DISABLED:
        raise ValueError("autoreset_mode: the asynchronous mode (batch_size < num_envs) "
                         "resets envs on its own; use NEXT_STEP or SAME_STEP, not DISABLED")


def plan_workers(num_envs: int, batch_size: int, num_workers: Optional[int],
                 envs_per_worker: Optional[int]) -> List[Tuple[int, int]]:
    """The env rows ``(begin, end)`` of each worker.

    Args:
        num_envs: number of envs.
        batch_size: envs per step (fewer than ``num_envs``: asynchronous mode).
        num_workers: worker processes, or ``None``.
        envs_per_worker: envs per worker, or ``None``.

    Returns:
        consecutive, non-empty row ranges covering ``[0, num_envs)``, sizes
        differing by at most one (the larger first).

    Raises:
        ValueError: both given, or values that do not fit (naming the argument).
    """
    n, b, is_async = num_envs, batch_size, batch_size < num_envs
    if num_workers is not None and envs_per_worker is not None:
        if int(num_workers) * int(envs_per_worker) != n:
            raise ValueError(f"num_workers={num_workers} and envs_per_worker="
                             f"{envs_per_worker} do not make {n} envs; give one of them")
    if envs_per_worker is not None:
        e = int(envs_per_worker)
        if e < 1 or n % e:
            raise ValueError(f"envs_per_worker: expected a divisor of the number of envs "
                             f"({n}), got {envs_per_worker}")
        num_workers = n // e
    elif num_workers is not None:
        if not 1 <= int(num_workers) <= n:
            raise ValueError(f"num_workers: expected 1 <= num_workers <= {n} (the number "
                             f"of envs), got {num_workers}")
        num_workers = int(num_workers)
        if is_async and n % num_workers:
            raise ValueError(f"num_workers: the asynchronous mode needs workers of equal "
                             f"size, so num_workers must divide the number of envs ({n}); "
                             f"got {num_workers}")
    else:
        num_workers = n if is_async else min(n, len(usable_cpus()))
    base, extra = divmod(n, num_workers)
    bounds, begin = [], 0
    for w in range(num_workers):
        end = begin + base + (w < extra)
        bounds.append((begin, end))
        begin = end
    e = bounds[0][1] - bounds[0][0]
    if is_async and b % e:
        raise ValueError(f"batch_size: the unit of asynchrony is a worker of {e} envs, "
                         f"so batch_size must be a multiple of envs_per_worker={e}; "
                         f"got {b}")
    return bounds


def declared_infos(info_example: Union[None, Dict[str, Any], Sequence[Dict[str, Any]]],
                   info_bytes: int) -> Tuple[List[Any], int]:
    """The signatures of the declared example infos, and the info area's size to fit them."""
    info_bytes = int(info_bytes)
    if info_bytes < 0:
        raise ValueError(f"info_bytes: expected a size in bytes >= 0, got {info_bytes}")
    if info_example is None:
        return [], info_bytes
    examples = [info_example] if isinstance(info_example, dict) else list(info_example)
    signatures: List[Any] = []
    for i, example in enumerate(examples):
        if not isinstance(example, dict):
            raise TypeError(f"info_example[{i}]: expected an info dict, got "
                            f"{type(example).__name__}")
        signature = signature_of(example)
        layout = InfoLayout(signature, 1 << 30)
        if layout.fits and signature not in signatures:
            signatures.append(signature)
            info_bytes = max(info_bytes, layout.nbytes)
    return signatures, info_bytes


class WorkerStartup:
    """The start-up steps of ``FastVectorEnv`` (a mixin): start the workers,
    check their spaces, build the shared rows and send each worker into its
    native job loop.

    They read the env's ``env_fns``, ``_bounds``, ``num_envs``, ``num_workers``,
    ``batch_size``, ``autoreset_mode``, ``info_bytes``, ``_declared_infos``,
    ``_workers_pinned`` and ``_row_worker``, and set its spaces, ``metadata``,
    ``render_mode``, ``_workers``, ``_block``, ``_board``, the row views and
    ``_info_decoder``.
    """

    def _start_workers(self, context: str) -> None:
        self._workers = [
            ProcessEnvironment(
                functools.partial(EnvGroup, self.env_fns[begin:end]),
                env_id=begin, hosted_envs=end - begin, fast=True, num_envs=self.num_envs,
                torch_num_threads_per_env=None, start_method=context,
                name=f"alf_env-vector-{w}")
            for w, (begin, end) in enumerate(self._bounds)]
        start_environments(self._workers, start_serially=False)

    def _check_spaces(self) -> None:
        promises = [w.call("describe") for w in self._workers]
        spaces = [pair for p in promises for pair in p()]
        obs0, act0 = spaces[0]
        for i, (obs, act) in enumerate(spaces[1:], start=1):
            for what, mine, first in (("observation", obs, obs0), ("action", act, act0)):
                if mine != first:
                    raise RuntimeError(
                        f"env {i} has {what} space {mine}, but env 0 has {first}; all "
                        f"envs of a FastVectorEnv must have the same {what} space")
        self.single_observation_space = obs0
        self.single_action_space = act0
        self.observation_space = batch_space(obs0, self.batch_size)
        self.action_space = batch_space(act0, self.batch_size)
        metadata, self.render_mode = self._workers[0].call("info")()
        self.metadata = dict(metadata, autoreset_mode=self.autoreset_mode)
        self._obs = SpaceLayout(obs0, "obs", "observation")
        self._act = SpaceLayout(act0, "act", "action")
        if self._act.num_pipe_leaves:
            raise ValueError(f"action space {act0}: {list(self._act.pipe_paths)} have no "
                             f"fixed size; FastVectorEnv moves actions through shared "
                             f"memory only")

    def _attach_workers(self, spin_us: int) -> None:
        self._block = SharedBlock(block_fields(self._obs, self._act, self.info_bytes),
                                  num_rows=self.num_envs, num_workers=self.num_workers)
        rows = EnvRows(self._block, self._obs, self._act)
        self._obs_views, self._act_views = rows.obs, rows.act
        self._reward, self._terminated = rows.reward, rows.terminated
        self._truncated, self._report = rows.truncated, rows.report
        info_view = rows.info if rows.info is not None else np.zeros((self.num_envs, 0),
                                                                     np.uint8)
        self._info_decoder = InfoDecoder(info_view, rows.info_layout, self._row_worker,
                                         self.num_workers)
        for w in range(self.num_workers):
            for lid, signature in enumerate(self._declared_infos, start=1):
                self._info_decoder.register(w, lid, signature)
        controller = self._block.controller(spin_us, workers_pinned=self._workers_pinned)
        self._board = JobBoard(controller, self._workers, on_ok=self._collect_reports)
        for w, worker in enumerate(self._workers):
            controller.set_worker_pid(w, worker.pid)
            handler = GymRowsHandler(self._bounds[w], self._obs, self._act,
                                     self.autoreset_mode, self.info_bytes,
                                     self._declared_infos)
            worker.start_fast_loop(FastLoopSpec(self._block, w, spin_us, handler,
                                                self._workers_pinned),
                                   functools.partial(self._board.serve_pipe, w))
