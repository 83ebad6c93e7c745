"""Batches N environments, each in its own worker process, over pipes.

:class:`ParallelAlfEnvironment` is the reference ("slow") path: actions and
time steps are pickled through each worker's pipe. The native
:class:`~alf_env.environments.fast_parallel_environment.FastParallelEnvironment`
keeps the same slot bookkeeping (:class:`SlotScheduler`) and must produce the
same time steps, value by value.

Slots and spares
----------------
The batch has ``num_slots = len(env_constructors) - num_spare_envs_for_reload``
slots; slot ``k`` owns rows ``[k * b, (k + 1) * b)`` of every batched tensor,
where ``b`` is each env's own batch size (1 for an unbatched env). ``env_id``
of a row is always its row index. With spares, an env that reports LAST is
handed a reset right away and queued as a spare, and its slot is taken by the
spare at the head of the queue, whose FIRST time step (from its own earlier
reset) is what the slot returns at the next step. A slow reset therefore
overlaps with the other envs' steps instead of stalling the batch.
"""

import collections
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import numpy as np
import torch

from alf_env import nest
from alf_env.data_structures import StepType, TimeStep
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.environments.process_environment import ProcessEnvironment, close_all
from alf_env.tensor_specs import torch_dtype_to_numpy


def start_environments(envs: Sequence[ProcessEnvironment], start_serially: bool) -> None:
    """Starts ``envs`` one after another, or all at once and then waits for each.

    On any failure every env is closed before the error propagates, so no
    worker is left behind.
    """
    try:
        if start_serially:
            for env in envs:
                env.start(wait_to_start=True)
        else:
            for env in envs:
                env.start(wait_to_start=False)
            for env in envs:
                env.wait_start()
    except BaseException:
        for env in envs:
            env.close()
        raise


def check_same_specs(envs: Sequence[ProcessEnvironment]) -> None:
    """Raises ``ValueError`` naming the first env whose specs differ from env 0's."""
    names = ("observation_spec", "action_spec", "reward_spec", "env_info_spec",
             "batched", "batch_size")
    first = envs[0]
    for i, env in enumerate(envs[1:], start=1):
        for name in names:
            expected, got = _spec_attr(first, name), _spec_attr(env, name)
            if expected != got:
                raise ValueError(
                    f"env {i}: {name} is {got!r}, but env 0 has {expected!r}; all "
                    f"envs of one batch must have identical specs")


def _spec_attr(env: ProcessEnvironment, name: str) -> Any:
    value = getattr(env, name)
    return value() if callable(value) else value


class ActionChecker:
    """Converts batched actions to numpy leaves, checking them against the spec.

    The per-leaf expectations are computed once, so the per-step cost is a
    flatten and a shape/dtype check per leaf.

    Args:
        action_spec: the per-env action spec nest.
        batch_size: the expected leading dimension.
    """

    def __init__(self, action_spec: Any, batch_size: int) -> None:
        self._spec = action_spec
        self._nested = nest.is_nested(action_spec)
        self._leaves = []
        for path, spec in nest.flatten_with_path(action_spec):
            field = f"action.{path}" if path else "action"
            shape = (batch_size,) + tuple(spec.shape)
            self._leaves.append((field, torch_dtype_to_numpy(spec.dtype), shape,
                                 tuple(spec.shape)))
        self._batch_size = batch_size

    def flat(self, action: Any) -> List[np.ndarray]:
        """Returns the flattened action as C-contiguous arrays of the spec dtypes.

        Raises:
            ValueError: naming the offending field and the expected shape and
                dtype, for a wrong nest structure, shape, batch size or a dtype
                that numpy's "safe" casting rule does not allow.
        """
        if self._nested or nest.is_nested(action):
            try:
                nest.assert_same_structure(action, self._spec)
            except (TypeError, ValueError) as err:
                raise ValueError(f"action: its nest structure does not match the "
                                 f"action spec {self._spec!r}: {err}") from None
            leaves = nest.flatten(action)
        else:
            leaves = [action]
        return [self._convert(leaf, *info) for leaf, info in zip(leaves, self._leaves)]

    def __call__(self, action: Any) -> Any:
        """Like :meth:`flat`, packed back into the action spec's structure."""
        return nest.pack_sequence_as(self._spec, self.flat(action))

    def _convert(self, leaf: Any, field: str, dtype: np.dtype, shape: tuple,
                 spec_shape: tuple) -> np.ndarray:
        if isinstance(leaf, torch.Tensor):
            leaf = leaf.detach().cpu().numpy()
        array = np.asarray(leaf)
        if array.shape != shape:
            raise ValueError(
                f"{field}: expected shape {shape} (batch size {self._batch_size} x spec "
                f"shape {spec_shape}) and dtype {dtype}, got shape {array.shape}")
        if array.dtype != dtype and not np.can_cast(array.dtype, dtype, casting="safe"):
            raise ValueError(
                f"{field}: expected dtype {dtype} (or one that casts to it safely), "
                f"got {array.dtype}; convert it explicitly, e.g. .astype({dtype.name!r})")
        return np.ascontiguousarray(array, dtype=dtype)


class _Resolved:
    """A promise whose value is already known (used in ``blocking`` mode)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def __call__(self) -> Any:
        return self._value


def _to_torch(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


class SlotScheduler:
    """Which env serves which slot, and which spares wait with a pending reset.

    Shared by both batched backends so that they make the same choices.

    Args:
        num_envs: all envs, spares included.
        num_spares: how many of them are spares (the last ones at first).
    """

    def __init__(self, num_envs: int, num_spares: int) -> None:
        self.num_slots = num_envs - num_spares
        self.slot_env: List[int] = list(range(self.num_slots))
        self.spares: Deque[int] = collections.deque(range(self.num_slots, num_envs))
        # slot -> the FIRST time step its new env produced when it was reset
        # (returned at the slot's next step instead of stepping it).
        self.fresh_slots: Dict[int, Any] = {}

    @property
    def has_spares(self) -> bool:
        return bool(self.spares)

    def swap(self, slot: int) -> "tuple[int, int]":
        """Gives ``slot`` the head spare; the old env goes to the tail.

        Returns:
            ``(old_env, new_env)``: the caller resets ``old_env`` and collects
            ``new_env``'s pending reset for the slot's next step.
        """
        old = self.slot_env[slot]
        new = self.spares.popleft()
        self.spares.append(old)
        self.slot_env[slot] = new
        return old, new


class ParallelAlfEnvironment(AlfEnvironment):
    """Batches environments that run in worker processes, over pipes.

    Args:
        env_constructors: one callable per env (spares included); each gets
            ``env_id=i`` if its signature accepts it.
        start_serially: start the workers one after another (less memory
            pressure) instead of all at once.
        blocking: step the envs one after another instead of overlapping
            them (for debugging).
        flatten: send actions and time steps as flat lists over the pipes.
        num_spare_envs_for_reload: how many of the envs are spares that
            replace an env whose episode ended (see module doc).
        torch_num_threads_per_env: ``torch.set_num_threads`` in each worker.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``.
    """

    # Whether the workers will run the native loop (FastParallelEnvironment).
    _FAST = False

    def __init__(self, env_constructors: Sequence[Callable[..., Any]],
                 start_serially: bool = True, blocking: bool = False,
                 flatten: bool = True, num_spare_envs_for_reload: int = 0,
                 torch_num_threads_per_env: Optional[int] = 1,
                 start_method: str = "fork") -> None:
        super().__init__()
        num_envs = len(env_constructors)
        if num_envs < 1:
            raise ValueError("env_constructors: expected at least one constructor, got none")
        if not 0 <= num_spare_envs_for_reload < num_envs:
            raise ValueError(
                f"num_spare_envs_for_reload: expected 0 <= value < {num_envs} (the "
                f"number of env_constructors), got {num_spare_envs_for_reload}")
        self._blocking = blocking
        self._envs = [
            ProcessEnvironment(ctor, env_id=i, flatten=flatten, fast=self._FAST,
                               num_envs=num_envs,
                               torch_num_threads_per_env=torch_num_threads_per_env,
                               start_method=start_method)
            for i, ctor in enumerate(env_constructors)
        ]
        start_environments(self._envs, start_serially)
        try:
            check_same_specs(self._envs)
            first = self._envs[0]
            self._env_batched = bool(first.batched)
            self._env_batch_size = first.batch_size if self._env_batched else 1
            if num_spare_envs_for_reload and self._env_batched:
                raise ValueError(
                    "num_spare_envs_for_reload: spares replace one env at the end of "
                    "its episode, which needs unbatched envs; got batched envs of "
                    f"batch size {self._env_batch_size}; use 0 spares")
            self._observation_spec = first.observation_spec()
            self._action_spec = first.action_spec()
            self._reward_spec = first.reward_spec()
            self._env_info_spec = first.env_info_spec()
            self._time_step_spec = first.time_step_spec()
        except BaseException:
            self.close()
            raise
        self._slots = SlotScheduler(num_envs, num_spare_envs_for_reload)
        self._batch_size = self._slots.num_slots * self._env_batch_size
        self._env_ids = np.arange(self._batch_size, dtype=np.int32)
        self._check_action = ActionChecker(self._action_spec, self._batch_size)

    # -- AlfEnvironment API --------------------------------------------------

    @property
    def batched(self) -> bool:
        return True

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def num_spare_envs_for_reload(self) -> int:
        return len(self._envs) - self._slots.num_slots

    @property
    def envs(self) -> List[ProcessEnvironment]:
        """All the worker envs, spares included."""
        return self._envs

    def worker_pids(self) -> List[int]:
        """Pids of every worker process, spares included."""
        return [env.pid for env in self._envs]

    def observation_spec(self) -> Any:
        return self._observation_spec

    def action_spec(self) -> Any:
        return self._action_spec

    def reward_spec(self) -> Any:
        return self._reward_spec

    def env_info_spec(self) -> Any:
        return self._env_info_spec

    def time_step_spec(self) -> Any:
        return self._time_step_spec

    def seed(self, seeds: Sequence[int]) -> None:
        """Seeds env ``i`` with ``seeds[i]`` (one seed per env, spares included)."""
        self._check_not_closed()
        seeds = list(seeds)
        if len(seeds) != len(self._envs):
            raise ValueError(f"seeds: expected {len(self._envs)} seeds (one per env, "
                             f"spares included), got {len(seeds)}")
        promises = [env.call("seed", s) for env, s in zip(self._envs, seeds)]
        for promise in promises:
            promise()

    def call_envs_with_same_args(self, name: str, *args, **kwargs) -> List[Any]:
        """Calls ``env.name(*args, **kwargs)`` in every env; returns their values."""
        self._check_not_closed()
        promises = [env.call(name, *args, **kwargs) for env in self._envs]
        return [promise() for promise in promises]

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders the env serving slot 0."""
        self._check_not_closed()
        return self._envs[self._slots.slot_env[0]].render(mode)

    def _close(self) -> None:
        """Closes every worker (``close()`` is idempotent and bounded in time)."""
        close_all(self._envs)

    # -- stepping ------------------------------------------------------------

    def _reset(self) -> TimeStep:
        self._check_not_closed()
        num_slots = self._slots.num_slots
        envs = self._slots.slot_env + list(self._slots.spares)
        promises = []
        for i in envs:
            promise = self._envs[i].reset(blocking=False)
            promises.append(_Resolved(promise()) if self._blocking else promise)
        # Spares keep their pending reset: it is collected when one takes a slot.
        self._spare_resets = dict(zip(envs[num_slots:], promises[num_slots:]))
        self._slots.fresh_slots.clear()
        return self._finish([p() for p in promises[:num_slots]])

    def _step(self, action: Any) -> TimeStep:
        self._check_not_closed()
        action = self._check_action(action)
        b = self._env_batch_size
        promises = dict(self._slots.fresh_slots)
        self._slots.fresh_slots.clear()
        for slot, env_index in enumerate(self._slots.slot_env):
            if slot in promises:
                continue
            rows = slice(slot * b, (slot + 1) * b)
            env_action = nest.map_structure(
                (lambda a: a[rows]) if self._env_batched else (lambda a: a[slot]), action)
            promise = self._envs[env_index].step(env_action, blocking=False)
            promises[slot] = _Resolved(promise()) if self._blocking else promise
        return self._finish([promises[slot]() for slot in range(self._slots.num_slots)])

    def _finish(self, results: List[Any]) -> TimeStep:
        """Batches the slots' time steps and hands ended slots to spares."""
        if self._slots.has_spares:
            for slot, time_step in enumerate(results):
                if int(np.asarray(time_step.step_type)) == StepType.LAST:
                    old, new = self._slots.swap(slot)
                    self._slots.fresh_slots[slot] = self._spare_resets.pop(new)
                    self._spare_resets[old] = self._envs[old].reset(blocking=False)
        combine = np.concatenate if self._env_batched else np.stack
        batched = nest.map_structure(lambda *xs: combine(xs), *results)
        batched = batched._replace(env_id=self._env_ids.copy())
        return nest.map_structure(_to_torch, batched)
