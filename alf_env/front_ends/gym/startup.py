"""Starting a ``FastVectorEnv``: the plan of its workers, the workers and its shared rows.

Each worker hosts a ``GymEnvBatch`` of consecutive envs, served from its native job
loop or by the pipe path: ``docs/architecture.rst`` ("Front ends").
"""

import functools
import multiprocessing
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
from absl import logging
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from alf_env.control_plane.affinity import normal_scheduling, usable_cpu_count
from alf_env.control_plane.channel import resolve_all
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.protocol import START_METHODS
from alf_env.data_plane.job_board import Board, JobBoard
from alf_env.data_plane.job_loop import JobLoopSpec, join_job_loop, start_job_loops
from alf_env.data_plane.shared_block import SharedBlock
from alf_env.front_ends.gym.action_items import action_layout
from alf_env.front_ends.gym.gym_rows import EnvRows, GymEnvBatch, GymRowsHandler, block_fields
from alf_env.front_ends.gym.info_layout import InfoLayout, Signature, signature_of
from alf_env.front_ends.gym.pipe_board import PipeBoard
from alf_env.front_ends.gym.pipe_path import PipeLayout, PipeRows, RowLayout
from alf_env.front_ends.gym.results import ResultAssembler
from alf_env.front_ends.gym.space_layout import SpaceLayout

__all__ = ["ObservationMode", "check_arguments", "resolve_context", "plan_workers",
           "declared_infos", "observation_spaces", "Spaces", "Transport", "make_worker",
           "describe_workers", "attach_workers"]

#: ``"same"``, ``"different"`` or ``(observation_space, single_observation_space)``.
ObservationMode = Union[str, Tuple[gym.Space[Any], gym.Space[Any]]]


def resolve_context(context: Optional[str]) -> str:
    """The start method: ``context``, or for ``None`` multiprocessing's default."""
    resolved = multiprocessing.get_context().get_start_method() if context is None else context
    if resolved not in START_METHODS:
        raise ValueError(f"context: expected None or one of {START_METHODS}, got {context!r}")
    return resolved


def check_arguments(env_fns: Sequence[Callable[[], gym.Env]], batch_size: int,
                    autoreset_mode: AutoresetMode, worker: Optional[Callable[..., None]],
                    observation_mode: ObservationMode, max_concurrency: object,
                    batch_infos: bool) -> Optional[int]:
    """Raises ValueError/TypeError for arguments FastVectorEnv cannot work with (gymnasium's
    checks and words, where it has them); returns ``max_concurrency``."""
    if worker is not None:
        raise TypeError("worker: a custom worker function is not supported by FastVectorEnv, whose "
                        "workers run alf_env's own loop; wrap the env instead (a gymnasium.Wrapper "
                        "changes what step and reset do) or use gymnasium.vector.AsyncVectorEnv")
    mode = observation_mode  # gymnasium's checks, with its messages
    if isinstance(mode, tuple) and len(mode) == 2:
        if not isinstance(mode[0], gym.Space) or not isinstance(mode[1], gym.Space):
            raise TypeError(f"Expected both elements of observation_mode to be Spaces, got "
                            f"{type(mode[0])} and {type(mode[1])}")
    elif not (isinstance(mode, str) and mode in ("same", "different")):
        raise ValueError(f"Invalid `observation_mode`, expected: 'same' or 'different' or "
                         f"tuple of single and batch observation space, actual got {mode}")
    n, b = len(env_fns), batch_size
    if n == 0:
        raise ValueError("env_fns: expected at least one env constructor, got none")
    for i, fn in enumerate(env_fns):
        if not callable(fn):
            raise TypeError(f"env_fns[{i}]: expected a callable returning a "
                            f"gymnasium.Env, got {type(fn).__name__}")
    if not 1 <= b <= n:
        raise ValueError(f"batch_size: expected 1 <= batch_size <= {n} (the number "
                         f"of envs), got {b}")
    if b < n and autoreset_mode is AutoresetMode.DISABLED:
        raise ValueError("autoreset_mode: the asynchronous mode (batch_size < num_envs) "
                         "resets envs on its own; use NEXT_STEP or SAME_STEP, not DISABLED")
    if b < n and isinstance(mode, str) and mode == "different":
        raise ValueError("observation_mode='different': the asynchronous mode (batch_size "
                         "< num_envs) returns other envs at each recv(), so no batched "
                         "space describes its observations; give the pair "
                         "(observation_space, single_observation_space) instead")
    if max_concurrency is not None:
        if not isinstance(max_concurrency, (int, np.integer)):
            raise ValueError(f"`max_concurrency` must be an integer or None, got "
                             f"{type(max_concurrency)}.")
        if max_concurrency < 1:
            raise ValueError(f"`max_concurrency` must be a positive or None, got "
                             f"{max_concurrency}.")
        max_concurrency = int(max_concurrency)
    if not batch_infos and b < n:
        raise ValueError(f"batch_infos=False: expected the synchronous mode, got batch_size={b} "
                         f"< {n} envs (recv() returns batched infos with info['env_id'])")
    return max_concurrency


def observation_spaces(mode: ObservationMode, spaces: Sequence[gym.Space[Any]],
                       batch_size: int) -> Tuple[gym.Space[Any], gym.Space[Any]]:
    """``(single_observation_space, observation_space)`` of envs with ``spaces``, and
    the errors (``RuntimeError`` naming the env), as gymnasium's vector envs give them."""
    if isinstance(mode, tuple):
        batched, single = mode
    elif mode == "same":
        single = spaces[0]
        for i, space in enumerate(spaces[1:], start=1):
            if space != single:
                raise RuntimeError(
                    f"FastVectorEnv(..., observation_mode='same') however some of the "
                    f"sub-environments observation spaces are not equivalent. env {i} has "
                    f"observation space {space}, but env 0 has {single}. If this is "
                    f"intentional, use `observation_mode='different'` instead.")
        return single, batch_space(single, batch_size)
    else:  # "different": batched first, as gymnasium does (its errors come first)
        single, batched = spaces[0], batch_differing_spaces(spaces)
    for i, space in enumerate(spaces):
        if not is_space_dtype_shape_equiv(single, space):
            raise RuntimeError(
                f"FastVectorEnv(..., observation_mode='different' or custom space) however "
                f"the sub-environment's observation spaces do not share a common shape and "
                f"dtype: env {i} has observation space {space}, against {single}")
    return single, batched


def plan_workers(num_envs: int, batch_size: int, num_workers: Optional[int],
                 envs_per_worker: Optional[int],
                 max_concurrency: Optional[int] = None) -> List[Tuple[int, int]]:
    """The env rows ``(begin, end)`` of each worker: consecutive, covering ``[0, num_envs)``,
    sizes differing by at most one (the larger first). A worker steps its envs one after
    the other, so ``max_concurrency`` bounds the workers (``docs/options.rst``).

    Raises:
        ValueError: values that do not fit (naming the argument).
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
            raise ValueError("num_workers: the asynchronous mode needs workers of equal size, so "
                             f"num_workers must divide the number of envs ({n}); got {num_workers}")
    else:
        num_workers = n if is_async else min(n, usable_cpu_count())
        if max_concurrency is not None and num_workers > max_concurrency:
            # Equal workers in the asynchronous mode: the largest divisor that fits.
            num_workers = (max(d for d in range(1, max_concurrency + 1) if n % d == 0)
                           if is_async else max_concurrency)
    if max_concurrency is not None and num_workers > max_concurrency:
        raise ValueError(f"max_concurrency={max_concurrency}: {num_workers} workers would "
                         f"step {num_workers} envs at once; give at most {max_concurrency} "
                         f"workers (num_workers / envs_per_worker)")
    base, extra = divmod(n, num_workers)
    bounds = [(w * base + min(w, extra), (w + 1) * base + min(w + 1, extra))
              for w in range(num_workers)]
    e = bounds[0][1] - bounds[0][0]
    if is_async and b % e:
        raise ValueError(f"batch_size: the unit of asynchrony is a worker of {e} envs, so "
                         f"batch_size must be a multiple of envs_per_worker={e}; got {b}")
    return bounds


def declared_infos(info_example: Union[None, Dict[str, Any], Sequence[Dict[str, Any]]],
                   info_bytes: int) -> Tuple[List[Signature], int]:
    """The signatures of the declared example infos, and the info area's size to fit them."""
    info_bytes = int(info_bytes)
    if info_bytes < 0:
        raise ValueError(f"info_bytes: expected a size in bytes >= 0, got {info_bytes}")
    if info_example is None:
        return [], info_bytes
    examples = [info_example] if isinstance(info_example, dict) else list(info_example)
    signatures: List[Signature] = []
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


class Spaces(NamedTuple):
    """What the workers' envs said of themselves (``each_env``: each env's two spaces)."""
    single_observation_space: gym.Space[Any]
    observation_space: gym.Space[Any]
    single_action_space: gym.Space[Any]
    action_space: gym.Space[Any]
    metadata: Dict[str, Any]
    render_mode: Optional[str]
    each_env: List[Tuple[gym.Space[Any], gym.Space[Any]]]


class Transport(NamedTuple):
    """How a ``FastVectorEnv`` reaches its workers once they are attached (the pipe path:
    no ``block``); ``rejoin(w, worker)`` makes a restarted worker ``w`` serve its rows."""
    block: Optional[SharedBlock]
    board: Board
    action: RowLayout
    action_views: List[np.ndarray]
    results: ResultAssembler
    rejoin: Callable[[int, ProcessEnvironment], None]


def make_worker(env_fns: Sequence[Callable[[], gym.Env]], bounds: Sequence[Tuple[int, int]],
                w: int, autoreset_mode: AutoresetMode, context: str,
                daemon: bool = True) -> ProcessEnvironment:
    """Worker ``w`` (not started), hosting the envs of the rows ``bounds[w]``."""
    begin, end = bounds[w]
    return ProcessEnvironment(
        functools.partial(GymEnvBatch, env_fns[begin:end], autoreset_mode=autoreset_mode),
        env_id=begin, hosted_envs=end - begin, fast=True, num_envs=bounds[-1][1],
        torch_num_threads_per_env=None, start_method=context,
        name=f"alf_env-vector-{w}", daemon=daemon)


def describe_workers(workers: Sequence[ProcessEnvironment], observation_mode: ObservationMode,
                     batch_size: int, autoreset_mode: AutoresetMode) -> Spaces:
    """The spaces of the workers' envs; ``RuntimeError`` if they differ (naming the env)."""
    promises = [w.call("describe") for w in workers]
    spaces = [pair for p in promises for pair in p()]
    act0 = spaces[0][1]
    for i, (_, act) in enumerate(spaces[1:], start=1):
        if act != act0:
            raise RuntimeError(
                f"env {i} has action space {act}, but env 0 has {act0}; all envs of "
                f"a FastVectorEnv must have the same action space")
    single, batched = observation_spaces(observation_mode, [obs for obs, _ in spaces], batch_size)
    metadata, render_mode = workers[0].call("info")()
    return Spaces(single, batched, act0, batch_space(act0, batch_size),
                  dict(metadata, autoreset_mode=autoreset_mode), render_mode, spaces)


def attach_workers(workers: Sequence[ProcessEnvironment], spaces: Spaces,
                   bounds: Sequence[Tuple[int, int]], *, shared_memory: bool,
                   autoreset_mode: AutoresetMode, copy: bool, info_bytes: int, batch_infos: bool,
                   declared_infos: Sequence[Signature], spin_us: int, workers_spread: bool,
                   pin_when_quiet: Optional[Sequence[int]]) -> Transport:
    """Sends each worker into its native job loop over new shared rows, or sets up the pipe
    path (``shared_memory=False``, or actions of no fixed size)."""
    observation = SpaceLayout(spaces.single_observation_space, "obs", "observation")
    action = action_layout(spaces.single_action_space)
    # Observations of no fixed size travel beside the rows (pipe leaves); actions cannot.
    if shared_memory and action.num_pipe_leaves:
        logging.info("FastVectorEnv: action space %s: %s have no fixed size; the envs step "
                     "through the pipe", spaces.single_action_space, list(action.pipe_paths))
        shared_memory = False
    if not shared_memory:
        return _attach_pipe(workers, spaces, bounds, observation, action, autoreset_mode, copy,
                            batch_infos)
    block = SharedBlock(block_fields(observation, action, info_bytes),
                        num_rows=bounds[-1][1], num_workers=len(workers))
    try:
        rows = EnvRows(block, observation, action)
        results = ResultAssembler(rows, observation, copy, workers, bounds, autoreset_mode,
                                  declared_infos, batch_infos=batch_infos)
        board = JobBoard(block.controller(spin_us, workers_spread=workers_spread), workers,
                         on_ok=results.collect_reports, pin_when_quiet=pin_when_quiet)
        handlers = [GymRowsHandler(rows_of, observation, action, autoreset_mode, info_bytes,
                                   declared_infos) for rows_of in bounds]
        start_job_loops(board, block, spin_us, workers_spread, handlers)
    except BaseException:
        block.close()
        raise
    normal_scheduling([w.pid for w in workers if w.pid is not None])  # not SCHED_BATCH

    def rejoin(w: int, worker: ProcessEnvironment) -> None:
        assert worker.pid is not None  # started
        normal_scheduling([worker.pid])  # as the first workers
        join_job_loop(board, JobLoopSpec(block, w, spin_us, handlers[w], workers_spread))
    return Transport(block, board, action, rows.act, results, rejoin)


def _attach_pipe(workers: Sequence[ProcessEnvironment], spaces: Spaces,
                 bounds: Sequence[Tuple[int, int]], observation: SpaceLayout,
                 fixed_action: SpaceLayout, autoreset_mode: AutoresetMode, copy: bool,
                 batch_infos: bool) -> Transport:
    """The pipe path: rows in this process, a board of pipe requests."""
    num_envs = bounds[-1][1]
    pipe_observation = PipeLayout(spaces.single_observation_space, "observation", num_envs)
    # Actions of a fixed size are checked as on the shared-memory path.
    action: RowLayout = fixed_action
    if fixed_action.num_pipe_leaves:
        action = PipeLayout(spaces.single_action_space, "action", num_envs)
    resolve_all([w.call("check_observations", observation) for w in workers])
    rows = PipeRows(pipe_observation, action, bounds)
    results = ResultAssembler(rows, pipe_observation, copy, workers, bounds, autoreset_mode,
                              payloads=rows.payloads, batch_infos=batch_infos)

    def rejoin(w: int, worker: ProcessEnvironment) -> None:
        resolve_all([worker.call("check_observations", observation)])
    return Transport(None, PipeBoard(workers, rows.actions_of, rows.store), action, rows.act,
                     results, rejoin)
