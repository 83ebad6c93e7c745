"""FastSubprocVecEnv: a stable-baselines3 ``VecEnv`` on alf_env's shared-memory workers.

On a ``FastVectorEnv`` in SB3's ``SAME_STEP`` autoreset mode, with ``batch_infos=False``
so that no gymnasium batching rule touches an env's info dict (docs/training.rst)."""

import collections
import contextlib
import functools
import multiprocessing as mp
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

try:
    from stable_baselines3.common.vec_env.base_vec_env import (
        VecEnv,
        VecEnvIndices,
        VecEnvObs,
        VecEnvStepReturn,
    )
except ImportError as exc:  # the optional extra is missing
    raise ImportError(f"alf_env.sb3 needs stable-baselines3 ({exc}); install it with "
                      f"pip install 'alf_env[sb3]'", name=exc.name) from exc

from alf_env.control_plane.affinity import AUTO, WorkerCpus
from alf_env.control_plane.guards import NotCopyable
from alf_env.control_plane.protocol import START_METHODS
from alf_env.control_plane.restart import RESTARTED_INFO_KEY, RestartPolicy
from alf_env.control_plane.step_timings import StepTimings
from alf_env.data_plane.shared_block import SPIN_ADAPTIVE
from alf_env.front_ends.gym.vector_env import FastVectorEnv
from alf_env.front_ends.sb3.actions import ActionRouter
from alf_env.front_ends.sb3.worker import PORT_ATTR, RESET_INFO, build_env

__all__ = ["FastSubprocVecEnv"]


class FastSubprocVecEnv(NotCopyable, VecEnv):
    """SB3's ``VecEnv`` API over :class:`alf_env.vector.FastVectorEnv` workers, a drop-in for
    ``SubprocVecEnv(env_fns, start_method=None)``; the keyword arguments are
    ``FastVectorEnv``'s (docs/options.rst).

    Args:
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``; ``None``:
            ``"forkserver"`` where available, else ``"spawn"``, as ``SubprocVecEnv``.
        restart_policy: restart a dead worker; each of its envs ends its episode,
            truncated (docs/contract.rst, "Restarts").

    Raises:
        RuntimeError: the envs' observation or action spaces differ.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], start_method: Optional[str] = None,
                 *, num_workers: Optional[int] = None, envs_per_worker: Optional[int] = None,
                 spin_us: int = SPIN_ADAPTIVE, worker_cpus: WorkerCpus = AUTO,
                 restart_policy: Optional[RestartPolicy] = None) -> None:
        env_fns = list(env_fns)
        if start_method is None:
            start_method = ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        try:
            mp.get_context(start_method)  # SubprocVecEnv's check, and its words
        except ValueError as exc:
            raise ValueError(f"start_method: {exc} (expected one of {START_METHODS} or "
                             f"None)") from exc
        self.waiting = False
        self.closed = False
        # Each worker hosts an Sb3Env per env: not a gymnasium.Env, but stepped like one.
        builders: List[Callable[[], Any]] = [functools.partial(build_env, fn) for fn in env_fns]
        self._vector_env = FastVectorEnv(
            builders,
            num_workers=num_workers, envs_per_worker=envs_per_worker, context=start_method,
            autoreset_mode=AutoresetMode.SAME_STEP, spin_us=spin_us,
            worker_cpus=worker_cpus, batch_infos=False, restart_policy=restart_policy)
        self.start_method = start_method
        # The observations last returned: a restarted env's terminal_observation.
        self._last_obs: Any = None
        try:
            super().__init__(len(env_fns), self._vector_env.single_observation_space,
                             self._vector_env.single_action_space)
        except BaseException:
            self._vector_env.close(terminate=True)
            raise
        self._actions = ActionRouter(self.action_space, self.num_envs)

    @property
    def vector_env(self) -> FastVectorEnv:
        """The ``FastVectorEnv`` underneath."""
        return self._vector_env

    def timings(self) -> StepTimings:
        """The vector env's ``timings()`` (one lockstep batch per ``step``)."""
        return self._vector_env.timings()

    def worker_pids(self) -> List[int]:
        """The pids of the worker processes."""
        return self._vector_env.worker_pids()

    def reset(self) -> VecEnvObs:
        """Resets every env with the seeds and options set since the last reset
        (a pending step is finished first and its results dropped, as SB3 cancels it)."""
        if self.waiting:
            self._vector_env.step_wait()
            self.waiting = False
        seeds = list(self._seeds)
        groups = _group_options(self._options)
        reset_infos: List[Dict[str, Any]] = [{} for _ in range(self.num_envs)]
        obs: Optional[VecEnvObs] = None
        for options, members in groups:
            if len(groups) == 1:
                obs, infos = self._vector_env.reset(seed=seeds, options=options or None)
            else:
                mask = np.zeros(self.num_envs, dtype=np.bool_)
                mask[members] = True
                obs, infos = self._vector_env.reset(
                    seed=seeds, options={**(options or {}), "reset_mask": mask})
            env_infos = cast(List[Dict[Any, Any]], infos)  # batch_infos=False: a list
            for i in members:  # Sb3Env.reset returned {RESET_INFO: the env's info}
                reset_infos[i] = env_infos[i][RESET_INFO]
                if RESTARTED_INFO_KEY in env_infos[i]:  # its worker died and was restarted
                    reset_infos[i] = {**reset_infos[i], RESTARTED_INFO_KEY: True}
        self.reset_infos = reset_infos
        self._reset_seeds()
        self._reset_options()
        assert obs is not None  # every env is in a group
        self._last_obs = obs
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Sends env ``i`` its ``actions[i]``, as given (``ValueError`` if not one per env)."""
        batch, passed = self._actions.split(actions)
        if passed:  # each to its env, as it is, before the step that uses it
            self._call_ports({i: ("stage", 1, action) for i, action in passed.items()})
        try:
            self._vector_env.step_async(batch)
        except BaseException:
            if passed:  # no step uses them; the step's own error is the one to raise
                with contextlib.suppress(Exception):
                    self._call_ports({i: ("unstage", 1) for i in passed})
            raise
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        """Waits for the steps; returns SB3's ``(obs, rewards, dones, infos)``."""
        try:
            obs, rewards, terminated, truncated, infos = self._vector_env.step_wait()
        finally:
            self.waiting = False
        dones = terminated | truncated
        # An ended env's info is {"final_obs", "final_info", RESET_INFO} (SAME_STEP autoreset).
        env_infos = cast(List[Dict[Any, Any]], infos)  # batch_infos=False: a list
        for i in np.flatnonzero(dones).tolist():
            ended = env_infos[i]
            self.reset_infos[i] = ended[RESET_INFO]
            if RESTARTED_INFO_KEY in ended:
                # Its worker was restarted: it ends truncated at the last observation returned.
                env_infos[i] = {"TimeLimit.truncated": True, RESTARTED_INFO_KEY: True,
                                "terminal_observation": _obs_of(self._last_obs, i)}
                continue
            info = ended["final_info"]
            info["terminal_observation"] = ended["final_obs"]
            env_infos[i] = info
        self._last_obs = obs
        return obs, rewards.astype(np.float32), dones, env_infos

    def close(self) -> None:
        """Ends the workers (bounded in time); closing twice is fine."""
        if self.closed:
            return
        self._vector_env.close()
        self.waiting = False
        self.closed = True

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> List[Any]:
        """Attribute ``attr_name`` of each env (``env.get_wrapper_attr``)."""
        return self._request("get_attr", indices, attr_name)

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has attribute ``attr_name`` (checked in the workers)."""
        return all(self._request("has_attr", None, attr_name))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Sets ``attr_name`` to ``value`` on each env (``setattr`` on its outermost wrapper)."""
        self._request("set_attr", indices, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> List[Any]:
        """Calls ``method_name(*method_args, **method_kwargs)`` of each env."""
        return self._request("env_method", indices, method_name, method_args, method_kwargs)

    def env_is_wrapped(self, wrapper_class: Type[gym.Wrapper],
                       indices: VecEnvIndices = None) -> List[bool]:
        """Whether each env is wrapped with ``wrapper_class`` (SB3's ``is_wrapped``)."""
        return self._request("is_wrapped", indices, wrapper_class)

    def get_images(self) -> Sequence[Optional[np.ndarray]]:
        """One frame per env if the envs render ``rgb_array`` (else ``None`` each and a warning)."""
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but this method assumes "
                          f"it is `rgb_array` to obtain images.", stacklevel=2)
            return [None] * self.num_envs
        return list(self._vector_env.render())

    def _request(self, op: str, indices: VecEnvIndices, *args: Any) -> List[Any]:
        """Runs ``op`` on the envs ``indices`` (in order, repeats and negatives as SB3's)."""
        if isinstance(indices, np.integer):
            indices = int(indices)
        n = self.num_envs
        targets = []
        for i in self._get_indices(indices):
            i = int(i)
            if not -n <= i < n:
                raise IndexError(f"indices: expected env indices in [0, {n}), got {i} "
                                 f"(negative ones count from the end, down to -{n})")
            targets.append(i % n)
        times = collections.Counter(targets)
        results = self._call_ports({i: (op, count) + args for i, count in times.items()})
        taken = {i: iter(values) for i, values in results.items()}
        return [next(taken[i]) for i in targets]

    def _call_ports(self, calls: Dict[int, Tuple[Any, ...]]) -> Dict[int, List[Any]]:
        """Runs ``port(*calls[i])`` on the port of each env ``i``; only their workers are asked."""
        return self._vector_env.call_envs(PORT_ATTR, {i: (call, {}) for i, call in calls.items()})


def _obs_of(obs: Any, i: int) -> Any:
    """A copy of env ``i``'s observation in the batch ``obs`` (as SB3 batches them)."""
    if isinstance(obs, dict):
        return {key: _obs_of(value, i) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_obs_of(value, i) for value in obs)
    return np.array(obs[i])


def _group_options(options: List[Dict[str, Any]]) -> List[Tuple[Dict[str, Any], List[int]]]:
    """Groups env indices by equal reset options: ``[(options, [i, ...]), ...]``."""
    groups: List[Tuple[Dict[str, Any], List[int]]] = []
    for i, opts in enumerate(options):
        for group_opts, members in groups:
            if _same(group_opts, opts):
                members.append(i)
                break
        else:
            groups.append((opts, [i]))
    return groups


def _same(a: Any, b: Any) -> bool:
    """``a == b`` for option dicts that may hold arrays."""
    try:
        return bool(np.all(a == b)) if not isinstance(a, dict) else (
            a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a))
    except (TypeError, ValueError):
        return a is b
