"""AlfRowsHandler: FastParallelEnvironment's job handler, ALF time steps in a worker's rows.

Each leaf is checked against the spec as it is written; an env with a flat step is
stepped through it (docs/architecture.rst, "One step of ``FastParallelEnvironment``")."""

import multiprocessing.connection
from typing import Any, Callable, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from alf_env import nest
from alf_env.control_plane.spec_checks import can_cast, time_step_count_error, time_step_leaf_error
from alf_env.control_plane.step_timings import StepClock
from alf_env.data_plane.shared_block import SharedBlock, copy_leaves
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.environments.alf_gym_wrapper import FlatStep, flat_steps_of
from alf_env.nest import compile_nest


class _Rows:
    """This worker's rows of a list of fields, and how to move nests in/out."""

    def __init__(self, block: SharedBlock, names: Tuple[str, ...], rows: Tuple[int, int],
                 batched: bool, spec: Any) -> None:
        begin, end = rows
        views = [block.views[name][begin:end] for name in names]
        # An unbatched env sees its one row without the batch dim (`v[0, ...]`: still a view).
        self.views = views if batched else [v[0, ...] for v in views]
        self.paths = [p for p, _ in nest.flatten_with_path(spec)]
        self._flatten, self._pack = compile_nest(spec)

    def read(self) -> Any:
        # Copies: the env may keep the action; the parent reuses the rows.
        return self._pack([np.array(v) for v in self.views])

    def write(self, value: Any, env_id: Any) -> None:
        self.write_leaves(self._flatten(value), env_id)

    def write_leaves(self, leaves: List[Any], env_id: Any, scalars: bool = False) -> None:
        """Writes a time step's leaves (``scalars``: some may be Python floats or bools)."""
        views = self.views
        if len(leaves) != len(views):
            raise time_step_count_error(env_id, len(leaves), self.paths)
        # Exact leaves in one native call; from the first that is not, the checks below.
        done = copy_leaves(views, leaves, scalars)
        if done == len(views):
            return
        for path, view, leaf in zip(self.paths[done:], views[done:], leaves[done:]):
            array = leaf if type(leaf) is np.ndarray else np.asarray(leaf)
            if array.shape != view.shape or (
                    array.dtype != view.dtype
                    and not can_cast(array.dtype, view.dtype, "same_kind")):
                raise time_step_leaf_error(env_id, path, array.shape, array.dtype,
                                           view.shape, view.dtype)
            # Plain assignment: cheaper than np.copyto, and the dtype was checked.
            view[...] = array


class MemberEnvs(Protocol):
    """Member envs that a worker steps one by one, each in its own rows (``AlfEnvBatch``)."""

    @property
    def members(self) -> Sequence[AlfEnvironment]:
        """The member envs, in row order."""

    def begin_job(self) -> None:
        """Called once before the members of a job are stepped or reset."""

    def step_member(self, j: int, action: Any) -> Any:
        """Steps member ``j``; returns its time step."""

    def step_member_flat(self, j: int, action_views: List[np.ndarray]) -> Optional[List[Any]]:
        """Steps member ``j`` with its flat step; its time step's leaves, or ``None`` when
        it has none or that step was no plain one (then :meth:`step_member`)."""

    def reset_member(self, j: int) -> Any:
        """Resets member ``j``; returns its time step."""

    def reset_ended(self) -> None:
        """Resets the members whose last step ended their episode (after the job)."""


class AlfRowsHandler:
    """FastParallelEnvironment's job handler (and factory): the worker owns ``rows``, ``(begin,
    end)``, of each field; ``grouped``: its env is a :class:`MemberEnvs`, its members share them."""

    #: Once bound: counts the step times (and a MemberEnvs's ``reset_ended``).
    after_step: Optional[Callable[[], None]] = None

    def __init__(self, rows: Tuple[int, int], action_fields: Tuple[str, ...],
                 time_step_fields: Tuple[str, ...], grouped: bool = False) -> None:
        self.rows = rows
        self.action_fields = action_fields
        self.time_step_fields = time_step_fields
        self.grouped = grouped

    def __call__(self, env: Any, block: SharedBlock, conn: multiprocessing.connection.Connection,
                 env_id: Optional[int], clock: Optional[StepClock] = None) -> "AlfRowsHandler":
        """Binds to the worker's env and the shared block (in the worker); each env's
        step is timed into ``clock`` (a fresh one when ``None``)."""
        batched = bool(env.batched)
        self._clock = clock if clock is not None else StepClock()
        self.after_step = self._clock.commit
        self._env = env
        self._env_id = env_id
        action_spec, time_step_spec = env.action_spec(), env.time_step_spec()

        def rows_of(rows: Tuple[int, int], batched_rows: bool) -> Tuple[_Rows, _Rows]:
            return (_Rows(block, self.action_fields, rows, batched_rows, action_spec),
                    _Rows(block, self.time_step_fields, rows, batched_rows, time_step_spec))

        self._actions, self._outputs = rows_of(self.rows, batched)
        flat = None if batched else flat_steps_of(env)
        self._flat_step: Optional[FlatStep] = None if flat is None else flat.step
        if self._flat_step is not None:
            self.step = self._step_flat  # type: ignore[method-assign]  # chosen per env
        if self.grouped:
            # Each member reads and writes its own rows: no slicing, no batching.
            self._group: MemberEnvs = env
            self.after_step = self._after_members_step
            begin, end = self.rows
            members = self._group.members
            n = len(members)
            per = (end - begin) // n
            member_batched = per > 1 or bool(members[0].batched)
            self._members = [
                rows_of((begin + j * per, begin + (j + 1) * per), member_batched)
                + ((env_id or 0) + j,)
                for j in range(n)]
            self._clock.resize(n)
            self.step, self.reset = (  # type: ignore[method-assign]
                self._step_members, self._reset_members)
        return self

    def step(self, arg: int) -> None:
        action = self._actions.read()
        now = self._clock.reader()
        start = now()
        time_step = self._env.step(action)
        self._clock.lap[0] = now() - start
        self._outputs.write(time_step, self._env_id)

    def reset(self, arg: int) -> None:
        self._outputs.write(self._env.reset(), self._env_id)

    def _step_flat(self, arg: int) -> None:
        flat_step = self._flat_step
        assert flat_step is not None  # this step is chosen only with a flat step
        now = self._clock.reader()
        start = now()
        result = flat_step(self._actions.views)
        if result is None:  # not a plain step (a reset): the env's step() does it
            time_step = self._env.step(self._actions.read())
            self._clock.lap[0] = now() - start
            self._outputs.write(time_step, self._env_id)
        else:
            self._clock.lap[0] = now() - start
            self._outputs.write_leaves(result[0], self._env_id, True)

    def _step_members(self, arg: int) -> None:
        group = self._group
        group.begin_job()
        now, lap = self._clock.reader(), self._clock.lap
        step_flat = group.step_member_flat
        results: List[Any] = []  # a flat step's leaves (a list), or a TimeStep
        for j, (actions, _, _) in enumerate(self._members):
            start = now()
            leaves = step_flat(j, actions.views)
            if leaves is not None:
                lap[j] = now() - start
                results.append(leaves)
                continue
            action = actions.read()
            start = now()
            time_step = group.step_member(j, action)
            lap[j] = now() - start
            results.append(time_step)
        for result, (_, outputs, env_id) in zip(results, self._members):
            if type(result) is list:
                # write_leaves' common case inline: exact leaves in one native call.
                views = outputs.views
                if len(result) != len(views) or copy_leaves(views, result, True) != len(views):
                    outputs.write_leaves(result, env_id, True)
            else:
                outputs.write(result, env_id)

    def _after_members_step(self) -> None:
        self._clock.commit()
        self._group.reset_ended()

    def _reset_members(self, arg: int) -> None:
        group = self._group
        group.begin_job()
        for j, (_, outputs, env_id) in enumerate(self._members):
            outputs.write(group.reset_member(j), env_id)
