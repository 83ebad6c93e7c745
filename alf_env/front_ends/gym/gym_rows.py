"""The worker side of :class:`alf_env.vector.FastVectorEnv`.

A worker hosts a :class:`GymEnvBatch` (its envs) and, in the job loop, a
:class:`GymRowsHandler` that steps them and writes their rows; what has no fixed size
goes home as one *report* per job: ``docs/architecture.rst`` ("One step of
FastVectorEnv", steps 9 to 13). A report larger than ``INLINE_REPORT_BYTES`` could fill
the pipe while the parent still waits for the job, so a thread sends it and the job
finishes at once; the parent reads it before it sends this worker anything else, so the
pipe stays in order.
"""

import copy
import multiprocessing.connection
import threading
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from alf_env.control_plane.protocol import MessageType
from alf_env.control_plane.remote import mark_raised_by
from alf_env.control_plane.step_timings import StepClock
from alf_env.control_plane.worker import close_each
from alf_env.data_plane.shared_block import SharedBlock, copy_leaves
from alf_env.front_ends.gym.info_codec import InfoEncoder, Payload
from alf_env.front_ends.gym.info_layout import Signature
from alf_env.front_ends.gym.space_layout import SpaceLayout

# Arguments of RESET jobs.
RESET_DEFAULT = 0   # every env, no seed, no options
RESET_STAGED = 1    # use what GymEnvBatch.stage_reset() stored

# Well below the smallest socket buffer Linux gives a multiprocessing pipe.
INLINE_REPORT_BYTES = 32 * 1024

#: A job's report, by local env: its info payload and its observation's pipe leaves
#: (what ``ResultAssembler.collect_reports`` reads in the parent).
Report = Dict[int, Tuple[Payload, Optional[List[Any]]]]

#: One env's answer: ``(obs, reward, terminated, truncated, info)``.
EnvResult = Tuple[Any, Any, Any, Any, Dict[str, Any]]

#: One env's call of ``call_envs``: ``(args, kwargs)``.
EnvCall = Tuple[Tuple[Any, ...], Dict[str, Any]]

# Names the envs' own step/reset/close must not be reached by through call().
RESERVED_CALL_NAMES = ("step", "reset", "close")

# The per-env scalar fields of the shared block, besides observation and action.
SCALAR_FIELDS = (("reward", (), np.float64),       # float64, like gymnasium's rewards
                 ("terminated", (), np.bool_),
                 ("truncated", (), np.bool_),
                 ("report", (), np.bool_),         # "my worker's report has an entry for me"
                 ("info_layout", (), np.int32))    # layout id of the info in my info area

#: Name of the info-area field (``(info_bytes,)`` uint8 per env; absent when 0).
INFO_FIELD = "info"


def block_fields(observation: SpaceLayout, action: SpaceLayout,
                 info_bytes: int = 0) -> List[Tuple[str, Tuple[int, ...], npt.DTypeLike]]:
    """Every field of a FastVectorEnv's shared block (one row per env)."""
    fields: List[Tuple[str, Tuple[int, ...], npt.DTypeLike]] = [
        *observation.fields, *action.fields, *SCALAR_FIELDS]
    if info_bytes > 0:
        fields.append((INFO_FIELD, (int(info_bytes),), np.dtype(np.uint8)))
    return fields


class EnvRows:
    """The views of a FastVectorEnv block, the same in the parent and the workers."""

    def __init__(self, block: SharedBlock, observation: SpaceLayout, action: SpaceLayout) -> None:
        views = block.views
        self.obs = observation.views(views)
        self.act = action.views(views)
        (self.reward, self.terminated, self.truncated, self.report,
         self.info_layout) = (views[name] for name, _, _ in SCALAR_FIELDS)
        self.info = views[INFO_FIELD] if INFO_FIELD in views else None


class StagedReset(NamedTuple):
    """What the next ``RESET_STAGED`` job does: per local env a seed and whether to
    reset it, and the options of every reset."""
    seeds: Sequence[Optional[int]]
    options: Optional[Dict[str, Any]]
    mask: Union[Sequence[bool], np.ndarray]


class GymEnvBatch:
    """The object a worker serves: its envs and the pipe-side operations on them, for
    either path (which one is known only once their spaces are)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], env_id: Optional[int] = None,
                 autoreset_mode: gym.vector.AutoresetMode = gym.vector.AutoresetMode.NEXT_STEP
                 ) -> None:
        self.first_env = env_id or 0
        self.envs: List[gym.Env] = []
        try:
            for fn in env_fns:
                self.envs.append(fn())
        except BaseException as exc:
            if isinstance(exc, Exception):
                name_env(exc, self.first_env + len(self.envs), "construction")
            self.close()
            raise
        self.staged: Optional[StagedReset] = None
        # Each env's step times (for ``timings()``), kept by whichever path steps them.
        self.step_clock = StepClock(len(self.envs))
        self.autoreset = Autoreset(autoreset_mode, len(self.envs))
        self._observation: Optional[SpaceLayout] = None
        self._scratch: List[np.ndarray] = []

    def describe(self) -> List[Tuple[gym.Space[Any], gym.Space[Any]]]:
        """``(observation_space, action_space)`` of each env."""
        return [(env.observation_space, env.action_space) for env in self.envs]

    def info(self) -> Tuple[Dict[str, Any], Optional[str]]:
        """``(metadata, render_mode)`` of the first env."""
        env = self.envs[0]
        return dict(env.metadata), env.render_mode

    def call_each(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> List[Any]:
        """``env.name(*args, **kwargs)`` (or the attribute) for each env, like gymnasium."""
        return [self._call(k, name, args, kwargs) for k in range(len(self.envs))]

    def call_some(self, name: str, calls: Dict[int, EnvCall]) -> Dict[int, Any]:
        """``name`` of each local env of ``calls``, with its own ``(args, kwargs)``."""
        return {k: self._call(k, name, args, kwargs) for k, (args, kwargs) in calls.items()}

    def _call(self, k: int, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if name in RESERVED_CALL_NAMES:
            raise ValueError(f"call({name!r}): use the vector env's own {name}() instead")
        try:
            attr = self.envs[k].get_wrapper_attr(name)
            return attr(*args, **kwargs) if callable(attr) else attr
        except Exception as exc:
            name_env(exc, self.first_env + k, f"call({name!r})")
            raise

    def set_each(self, name: str, values: Sequence[Any]) -> None:
        for k, (env, value) in enumerate(zip(self.envs, values)):
            try:
                env.set_wrapper_attr(name, value)
            except Exception as exc:
                name_env(exc, self.first_env + k, f"set_attr({name!r})")
                raise

    def stage_reset(self, staged: StagedReset) -> None:
        self.staged = staged

    def check_observations(self, layout: SpaceLayout) -> None:
        """From now on (the pipe path), refuses an observation that ``layout`` refuses,
        naming its env, as the shared-memory path does."""
        self._observation = layout
        self._scratch = layout.views({name: np.zeros((1, *shape), dtype)
                                      for name, shape, dtype in layout.fields})

    def step(self, actions: Sequence[Any]) -> List[EnvResult]:
        """The pipe path's STEP: each env ``k`` steps with ``actions[k]``; their results."""
        results = []
        now, record = self.step_clock.now, self.step_clock.record
        for k, (env, action) in enumerate(zip(self.envs, actions)):
            try:
                start = now()
                result = self.autoreset.step(k, env, action)
                record(k, now() - start)
            except Exception as exc:
                name_env(exc, self.first_env + k, "step")
                raise
            results.append(result)
            if self._observation is not None:
                check_observation(self._observation, self._scratch, 0, result[0],
                                  self.first_env + k)
        return results

    def reset(self, arg: int, autoreset: Optional["Autoreset"] = None) -> List[Optional[EnvResult]]:
        """Runs a RESET job: the staged reset (``RESET_STAGED``, used up), else every env
        with no seed and no options. Per env, its result (``None``: left alone).
        ``autoreset``: the rule whose state the resets clear (default: the pipe path's)."""
        autoreset = autoreset or self.autoreset
        n = len(self.envs)
        staged = StagedReset([None] * n, None, [True] * n)
        if arg == RESET_STAGED:
            assert self.staged is not None  # stage_reset() came first
            staged, self.staged = self.staged, None
        results: List[Optional[EnvResult]] = []
        for k, env in enumerate(self.envs):
            if not staged.mask[k]:
                results.append(None)
                continue
            try:
                obs, info = autoreset.reset(k, env, staged.seeds[k], staged.options)
            except Exception as exc:
                name_env(exc, self.first_env + k, "reset")
                raise
            if self._observation is not None:
                check_observation(self._observation, self._scratch, 0, obs, self.first_env + k)
            results.append((obs, 0.0, False, False, info))
        return results

    def close(self) -> None:
        """Closes every env (all of them, even if one raises; the first error wins)."""
        close_each(self.envs)


def check_observation(layout: SpaceLayout, views: Sequence[np.ndarray], row: int, obs: Any,
                      env: int) -> List[Any]:
    """``layout.write_row(views, row, obs)``, its ``ValueError`` naming ``env``."""
    try:
        return layout.write_row(views, row, obs)
    except ValueError as exc:
        raise ValueError(f"env {env} returned an observation that does not fit its "
                         f"observation space {layout.space}: {exc}") from None


class Autoreset:
    """gymnasium's autoreset rule (``SyncVectorEnv``'s) for the envs of one worker, shared
    by both paths so that they step and reset an env alike. ``step(k, env, action)``
    steps local env ``k`` under the mode's rule."""

    def __init__(self, mode: gym.vector.AutoresetMode, num_envs: int) -> None:
        self.needs_reset = [False] * num_envs
        modes = gym.vector.AutoresetMode
        self.step = {modes.NEXT_STEP: self._step_next, modes.SAME_STEP: self._step_same,
                     modes.DISABLED: self._step_disabled}[mode]

    def reset(self, k: int, env: gym.Env, seed: Optional[int],
              options: Optional[Dict[str, Any]]) -> Tuple[Any, Dict[str, Any]]:
        obs, info = env.reset(seed=seed, options=options)
        self.needs_reset[k] = False
        return obs, info

    def _step_next(self, k: int, env: gym.Env, action: Any) -> Tuple[Any, ...]:
        if self.needs_reset[k]:
            obs, info = env.reset()
            result: Tuple[Any, ...] = (obs, 0.0, False, False, info)
        else:
            result = env.step(action)
        self.needs_reset[k] = bool(result[2] or result[3])
        return result

    def _step_same(self, k: int, env: gym.Env, action: Any) -> Tuple[Any, ...]:
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            # Copies taken before the reset: an env may reuse its info dict (or
            # its observation array) and clear or overwrite it in reset(), and
            # SyncVectorEnv batches the finished step's values before it resets.
            final_obs, final_info = copy.deepcopy(obs), copy.deepcopy(info)
            obs, reset_info = env.reset()
            # The order in which SyncVectorEnv adds them to the batched info.
            info = {"final_obs": final_obs, "final_info": final_info, **reset_info}
        return obs, reward, terminated, truncated, info

    def _step_disabled(self, k: int, env: gym.Env, action: Any) -> Tuple[Any, ...]:
        # The parent refuses to step an env that needs a reset.
        return env.step(action)


class GymRowsHandler:
    """The :class:`~alf_env.data_plane.handlers.HandlerFactory` (in the parent) and, bound,
    :class:`~alf_env.data_plane.handlers.JobHandler` (in the worker) of FastVectorEnv's
    workers. ``rows``: ``(begin, end)``, the env rows it owns."""

    # Once a step is reported: count its envs' step times (the autoreset included).
    after_step: Optional[Callable[[], None]] = None

    def __init__(self, rows: Tuple[int, int], observation: SpaceLayout,
                 action: SpaceLayout, autoreset_mode: gym.vector.AutoresetMode,
                 info_bytes: int = 0, declared_infos: Sequence[Signature] = ()) -> None:
        self.rows = rows
        self.observation = observation
        self.action = action
        self.autoreset_mode = autoreset_mode
        self.info_bytes = info_bytes
        self.declared_infos = tuple(declared_infos)

    def __call__(self, group: GymEnvBatch, block: SharedBlock,
                 conn: multiprocessing.connection.Connection,
                 env_id: Optional[int], clock: Optional[StepClock] = None) -> "GymRowsHandler":
        """Binds to the worker's env group, the shared block and the pipe (in the worker)."""
        self._clock = group.step_clock if clock is None else clock
        self._group = group
        self._conn = conn
        self._rows = rows = EnvRows(block, self.observation, self.action)
        n = len(group.envs)
        self._autoreset = Autoreset(self.autoreset_mode, n)
        self._encoder = InfoEncoder(self.info_bytes if self._rows.info is not None else 0, n,
                                    self.declared_infos)
        self._new_layouts: List[Tuple[int, Signature]] = []
        self._sender: Optional[threading.Thread] = None
        # _write_exact's views per env: observation, reward, terminated, truncated,
        # then (per layout id, made when first used) its info record's fields.
        self._exact_rows: Optional[List[List[Any]]] = None
        if self.observation.is_single_array:
            self._exact_rows = [[rows.obs[0][row, ...], rows.reward[row, ...],
                                 rows.terminated[row, ...], rows.truncated[row, ...]]
                                for row in range(*self.rows)]
        self._exact_info_rows: Dict[Tuple[int, int], List[Any]] = {}
        # What each env's info_layout and report rows hold, as last written
        # here: (layout id, report), or None when not known.
        self._marks: List[Optional[Tuple[int, bool]]] = [None] * n
        self._step_one = self._autoreset.step
        self.after_step = self._clock.commit
        return self

    def step(self, arg: int) -> None:
        """Steps every env with its action row, then writes their rows: the steps run back to
        back, so that in a timed step one clock reading between two envs' steps times both."""
        report: Report = {}
        begin = self.rows[0]
        read_row, act, step_one = self.action.read_row, self._rows.act, self._step_one
        group = self._group
        envs = group.envs
        # The actions are read first, so that in a timed step one clock reading
        # between two envs' steps times both (after_step counts the lap).
        actions = [read_row(act, begin + k) for k in range(len(envs))]
        clock = self._clock
        now = StepClock.now if clock.tick() else None
        lap = clock.lap
        results = []
        start = 0 if now is None else now()
        for k, env in enumerate(envs):
            try:
                results.append(step_one(k, env, actions[k]))
            except Exception as exc:
                name_env(exc, self._group.first_env + k, "step")
                raise
            if now is not None:
                end = now()
                lap[k] = end - start
                start = end
        for k, (obs, reward, terminated, truncated, info) in enumerate(results):
            try:
                self._write(k, begin + k, obs, reward, terminated, truncated, info, report)
            except Exception as exc:
                name_env(exc, self._group.first_env + k, "step")
                raise
        self._send(report)

    def reset(self, arg: int) -> None:
        """Resets the envs (all, or what ``stage_reset`` said) and writes their rows."""
        report: Report = {}
        begin = self.rows[0]
        for k, result in enumerate(self._group.reset(arg, self._autoreset)):
            if result is None:  # left alone by reset_mask
                self._rows.report[begin + k] = False
                self._marks[k] = None
                continue
            try:
                self._write(k, begin + k, *result, report)
            except Exception as exc:
                name_env(exc, self._group.first_env + k, "reset")
                raise
        self._send(report)

    def _write(self, k: int, row: int, obs: Any, reward: Any, terminated: Any, truncated: Any,
               info: Dict[str, Any], report: Report) -> None:
        if (self._exact_rows is not None and self._write_exact(
                self._exact_rows[k], k, row, obs, reward, terminated, truncated, info)):
            return
        rows = self._rows
        pipe_leaves = check_observation(self.observation, rows.obs, row, obs,
                                        self._group.first_env + k)
        rows.reward[row] = reward
        rows.terminated[row] = terminated
        rows.truncated[row] = truncated
        learned = len(self._new_layouts)
        layout_id, payload = self._encoder.encode(k, info, rows.info, row, self._new_layouts)
        rows.info_layout[row] = layout_id
        has_report = payload is not None or bool(pipe_leaves) or len(self._new_layouts) > learned
        rows.report[row] = has_report
        self._marks[k] = (layout_id, has_report)
        if has_report:
            report[k] = (payload, pipe_leaves or None)

    def _write_exact(self, dst: List[Any], k: int, row: int, obs: Any, reward: Any,
                     terminated: Any, truncated: Any, info: Dict[str, Any]) -> bool:
        """The common step's write in one native copy: an observation of the space's exact
        dtype and shape, exact scalars, an info of the env's last layout (or none).
        ``False`` for anything else, which :meth:`_write` then writes whole."""
        leaves: Tuple[Any, ...] = (obs, reward, terminated, truncated)
        lid = 0
        if info:
            cached = self._encoder.cached_record(k, info)
            if cached is None:
                return False
            lid, layout, values = cached
            key = (k, lid)
            full = self._exact_info_rows.get(key)
            if full is None:
                records = self._encoder.record_rows(lid, self._rows.info)
                full = self._exact_info_rows[key] = dst + [
                    records[name][row, ...] for _, _, name, _ in layout.shm]
            dst, leaves = full, leaves + values
        if copy_leaves(dst, leaves, True) != len(dst):
            return False
        if self._marks[k] != (lid, False):
            self._rows.info_layout[row] = lid
            self._rows.report[row] = False
            self._marks[k] = (lid, False)
        return True

    def _send(self, report: Report) -> None:
        """Sends the job's report (if any) home, by a thread if it is large."""
        if self._sender is not None:
            self._sender.join()
            self._sender = None
        if not report:
            return
        new_layouts, self._new_layouts = self._new_layouts, []
        data = ForkingPickler.dumps((MessageType.RESULT, (report, new_layouts)))
        if len(data) <= INLINE_REPORT_BYTES:
            self._conn.send_bytes(data)
            return
        self._sender = threading.Thread(target=self._conn.send_bytes, args=(data,),
                                        name="alf_env-report-sender", daemon=True)
        self._sender.start()


def name_env(exc: BaseException, env_index: int, during: str) -> None:
    """Notes on ``exc`` which env of the worker raised it (and marks it, so that
    the error report names that env, not the worker's first)."""
    mark_raised_by(exc, env_index)
    if hasattr(exc, "add_note"):
        exc.add_note(f"(raised by env {env_index} of the vector env during {during})")
