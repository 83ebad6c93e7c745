"""RayVectorEnv: a gymnasium vector env whose envs are split over Ray actors, each stepping
its share in a local ``FastVectorEnv`` (docs/distributed.rst); its API state is a ``CallState``."""

import contextlib
import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from absl import logging
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from alf_env.front_ends.gym.results import ENV_ID_DTYPE
from alf_env.front_ends.gym.space_layout import SpaceLayout
from alf_env.front_ends.gym.state import AsyncState, CallState, Seeds, Step, VectorApi
from alf_env.front_ends.ray.actor import Failure
from alf_env.front_ends.ray.batching import concat_batches, merge_infos, split_batch
from alf_env.front_ends.ray.engine import (
    ActorOptions,
    EnvActors,
    Job,
    options_per_actor,
    raise_first_failure,
)
from alf_env.front_ends.ray.hosts import GymHost
from alf_env.front_ends.ray.restart import RestartPolicy
from alf_env.front_ends.ray.shares import actors_of, plan_shares

__all__ = ["RayVectorEnv"]


class RayVectorEnv(VectorApi, gym.vector.VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` whose envs run on ``num_actors`` Ray actors.

    Args:
        env_fns: one constructor per env (pickled, called on the actors' nodes).
        batch_size: envs returned per step; fewer than ``len(env_fns)``: the
            asynchronous (EnvPool) mode, in units of whole actors.
        actor_options: ``ray.remote`` options, one dict for every actor or one
            per actor (docs/distributed.rst, "How envs are placed on actors").
        restart_policy: recreate dead actors (``None``: a death raises ``ActorDiedError``).
        vector_kwargs: arguments of each actor's ``FastVectorEnv``.
        start_timeout: seconds the actors may take to be placed and start.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], *, num_actors: int,
                 batch_size: Optional[int] = None, actor_options: ActorOptions = None,
                 autoreset_mode: Union[AutoresetMode, str] = AutoresetMode.NEXT_STEP,
                 restart_policy: Optional[RestartPolicy] = None,
                 vector_kwargs: Optional[Dict[str, Any]] = None,
                 start_timeout: float = 300.0) -> None:
        env_fns = list(env_fns)
        self.num_envs = len(env_fns)
        self.batch_size = self.num_envs if batch_size is None else int(batch_size)
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.shares = plan_shares(self.num_envs, num_actors, self.batch_size, self.autoreset_mode)
        self.num_actors = len(self.shares)
        self.is_async = self.batch_size < self.num_envs
        self._share = len(self.shares[0])
        self._last_actors: List[int] = []
        self._needs_reset = np.zeros(self.num_envs, dtype=np.bool_)
        self._last_obs: List[Any] = [None] * self.num_actors
        self._reset_actors: List[int] = []
        # Typed as once built: None only if building it below fails (see __del__).
        self._group: EnvActors = None  # type: ignore[assignment]
        kwargs = dict(vector_kwargs or {}, autoreset_mode=self.autoreset_mode, copy=False)
        factories = [functools.partial(GymHost, env_fns[s.start:s.stop], kwargs)
                     for s in self.shares]
        options = options_per_actor(actor_options, self.num_actors)
        self._group = EnvActors(factories, self.shares, actor_options=options,
                                restart_policy=restart_policy, on_restart=self._restart_with_reset,
                                start_timeout=start_timeout)
        group = self._group  # (not self: the state must not refer back to the env)
        self._calls = CallState(type(self).__name__, self.num_envs, self.is_async,
                                broken_by=lambda: group.broken)
        described = self._group.start()
        obs_space, act_space, metadata, self.render_mode = described[0]
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, self.batch_size)
        self.action_space = batch_space(act_space, self.batch_size)
        self.metadata = dict(metadata, autoreset_mode=self.autoreset_mode)
        self._act = SpaceLayout(act_space, "act", "action")

    def reset_async(self, seed: Seeds = None, options: Optional[Dict[str, Any]] = None) -> None:
        """Posts the resets to the actors; collect them with :meth:`reset_wait`."""
        seeds, options, mask = self._calls.reset_arguments(seed, options)
        self._drain()
        actors = [j for j, s in enumerate(self.shares) if mask is None or mask[s].any()]
        for j in actors:
            s = self.shares[j]
            local = dict(options or {})
            if mask is not None and j not in self._group.fresh:
                local["reset_mask"] = mask[s].copy()
            self._group.post(j, "reset", None if seed is None else seeds[s.start:s.stop],
                             local or None, restarted=j in self._group.fresh)
        self._needs_reset[:] = False if mask is None else self._needs_reset & ~mask
        self._reset_actors = actors
        self._calls.pending = AsyncState.WAITING_RESET

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        self._calls.check_waiting(AsyncState.WAITING_RESET, "reset_wait", "reset_async")
        if self.is_async:
            obs, _, _, _, infos = self._receive(timeout, "reset")
            return obs, infos
        results = self._collect(self._reset_actors, len(self._reset_actors), timeout, "reset")
        parts = []
        for j, job, (obs, infos) in results:
            self._last_obs[j] = obs
            parts.append((_flag_restart(infos, job, len(self.shares[j])), self.shares[j].start))
        obs = concat_batches(self.single_observation_space, self._last_obs)
        return obs, merge_infos(sorted(parts, key=lambda p: p[1]), self.num_envs)

    def step(self, actions: Any) -> Step:
        """Steps the envs (asynchronous mode: those of the last ``recv``)."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Checks and splits the actions and posts one step per actor; returns at once
        (a malformed action raises ``ValueError``, nothing sent)."""
        self._calls.check_ready("step_async")
        if self.is_async and not self._last_actors:
            raise self._calls.no_recv_yet()
        if not self.is_async and self._group.busy():
            raise AlreadyPendingCallError(f"step_async: actors {self._group.busy()} still run jobs "
                                          f"of send()/async_reset(); recv() them first", "step")
        self._send(actions, self._last_actors if self.is_async else list(range(self.num_actors)))
        self._calls.pending = AsyncState.WAITING_STEP

    def step_wait(self, timeout: Optional[float] = None) -> Step:
        self._calls.check_waiting(AsyncState.WAITING_STEP, "step_wait", "step_async")
        if self.is_async:
            return self._receive(timeout, "step")
        results = sorted(self._collect(range(self.num_actors), self.num_actors, timeout,
                                       "step"), key=lambda r: r[0])
        return self._join(results, self.num_envs)

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Sends :meth:`call` to every actor; collect with :meth:`call_wait`."""
        self._calls.check_ready("call_async")
        self._group.post_calls("call", [(name, args, kwargs)] * self.num_actors)
        self._calls.pending = AsyncState.WAITING_CALL

    def call_wait(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        self._calls.check_waiting(AsyncState.WAITING_CALL, "call_wait", "call_async")
        groups = self._calls.guard(lambda: self._group.wait_calls(timeout, "call"))
        self._calls.pending = AsyncState.DEFAULT
        return tuple(v for values in groups for v in values)

    def set_attr(self, name: str, values: Any) -> None:
        """Sets attribute ``name`` of every env (one value per env, or one for all)."""
        values = self._calls.attr_values(name, values)
        self._calls.guard(lambda: self._group.call_all(
            "set_attr", [(name, list(values[s.start:s.stop])) for s in self.shares],
            None, "set_attr"))

    @property
    def np_random_seed(self) -> Tuple[Any, ...]:  # type: ignore[override]  # AsyncVectorEnv's
        """The ``np_random_seed`` of every env (as gymnasium's vector envs give it)."""
        return self.get_attr("np_random_seed")

    def actor_info(self) -> List[Dict[str, Any]]:
        """Where each actor runs: its ``envs``, ``node`` (host and IP), Ray's ``node_id``,
        ``pid``, the ``worker_pids`` of its env workers and its ``restarts``."""
        self._calls.check_running()
        return self._group.info()

    def actor_handles(self) -> List[Any]:
        """The Ray actor handles, by actor index (for monitoring and fault injection)."""
        self._calls.check_running()
        return list(self._group.actors)

    def async_reset(self) -> None:
        self._calls.check_ready("async_reset")
        self._drain()
        self._needs_reset[:] = False
        for j in range(self.num_actors):
            self._group.post(j, "reset", None, None, restarted=j in self._group.fresh)

    def send(self, actions: Any, env_ids: npt.ArrayLike) -> None:
        self._calls.check_ready("send")
        self._send(actions, actors_of(env_ids, self.shares, self._group.busy()))

    def recv(self, timeout: Optional[float] = None) -> Step:
        self._calls.check_ready("recv")
        return self._receive(timeout, "recv")

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False) -> None:
        """Closes the actors' envs (unless ``terminate``; within ``timeout``, default 10 s),
        then kills every actor and waits (at most 10 s) until Ray confirms it is gone."""
        if self._group is not None:
            self._calls.close()
            self._group.close(terminate=terminate, timeout=timeout)

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and getattr(self, "_group", None) is not None:
            with contextlib.suppress(Exception):  # Ray may be shut down already
                self.close(terminate=True)

    def _send(self, actions: Any, actors: List[int]) -> None:
        n = len(actors) * self._share if self.is_async else self.num_envs
        self._act.encode_batch(actions, n)  # raises ValueError naming the field
        ids = np.array([i for j in actors for i in self.shares[j]])
        if self.autoreset_mode is AutoresetMode.DISABLED and self._needs_reset[ids].any():
            ended = ids[self._needs_reset[ids]].tolist()
            raise AssertionError(
                f"envs {ended} ended (terminated or truncated) and autoreset_mode is "
                f"DISABLED: reset them first, e.g. reset(options={{'reset_mask': mask}})")
        ends = np.cumsum([len(self.shares[j]) for j in actors]).tolist()
        bounds = list(zip([0] + ends[:-1], ends))
        parts = split_batch(self.single_action_space, actions, bounds, "action")
        for j, part in zip(actors, parts):
            if j in self._group.fresh:  # recreated by a call: report it now
                self._group.post(j, "reset", None, None, restarted=True)
            else:
                self._group.post(j, "step", part)

    def _receive(self, timeout: Optional[float], during: str) -> Step:
        """The first ``batch_size // share`` actors in flight to finish."""
        k = self.batch_size // self._share
        busy = self._group.busy()
        if len(busy) < k:
            self._calls.pending = AsyncState.DEFAULT
            raise NoAsyncCallError(
                f"recv() returns {self.batch_size} envs, but only {len(busy) * self._share} "
                f"are in flight; send() or async_reset() first", "recv")
        results = self._collect(busy, k, timeout, during, keep_on_failure=True)
        out = self._join(results, self.batch_size)
        ids = np.array([i for j, _, _ in results for i in self.shares[j]])
        out[4]["env_id"] = ids.astype(ENV_ID_DTYPE)
        self._last_actors = [j for j, _, _ in results]
        return out

    def _join(self, results: List[Tuple[int, Job, Any]], n: int) -> Step:
        """Joins the actors' step (or restart reset) results, in the order given."""
        obs, rewards, terminated, truncated, parts = [], [], [], [], []
        offset = 0
        for j, job, value in results:
            k = len(self.shares[j])
            if job.method == "reset":  # an async_reset, or the restart of a dead actor
                o, info = value
                r, te = np.zeros(k), np.zeros(k, dtype=np.bool_)
                tr = np.full(k, job.restarted, dtype=np.bool_)
                info = _flag_restart(info, job, k)
            else:
                o, r, te, tr, info = value
            self._last_obs[j] = o
            obs.append(o)
            rewards.append(r)
            terminated.append(te)
            truncated.append(tr)
            parts.append((info, offset))
            offset += k
            self._needs_reset[self.shares[j]] = np.logical_or(te, tr)
        return (concat_batches(self.single_observation_space, obs), np.concatenate(rewards),
                np.concatenate(terminated), np.concatenate(truncated), merge_infos(parts, n))

    def _collect(self, actors: Sequence[int], count: int, timeout: Optional[float],
                 during: str, keep_on_failure: bool = False) -> List[Tuple[int, Job, Any]]:
        """Collects ``count`` jobs (the call ends unless it timed out); an env exception
        is raised once all are in, ``keep_on_failure`` keeps the others' for ``recv``."""
        results = self._calls.guard(lambda: self._group.collect(actors, count, timeout, during))
        self._calls.pending = AsyncState.DEFAULT
        if keep_on_failure and any(isinstance(v, Failure) for _, _, v in results):
            self._group.put_back([r for r in results if not isinstance(r[2], Failure)])
        raise_first_failure(results)
        return results

    def _restart_with_reset(self, j: int, job: Job) -> None:
        """Resets a recreated actor's envs (a reset keeps its seeds)."""
        seeds, options = (job.args if job.method == "reset" else (None, None))
        if options:
            options = {k: v for k, v in options.items() if k != "reset_mask"} or None
        self._group.post(j, "reset", seeds, options, restarted=True)

    def _drain(self) -> None:
        """Finishes jobs in flight, dropping their results (before a reset)."""
        busy = self._group.busy()
        if busy:
            results = self._calls.guard(lambda: self._group.collect(
                busy, len(busy), None, "finishing earlier jobs"))
            for j, _, value in results:  # the reset is the recovery from their errors
                if isinstance(value, Failure):
                    logging.warning("RayVectorEnv: a job in flight before the reset raised "
                                    "%r; dropped", value.to_exception(j))


def _flag_restart(infos: Dict[str, Any], job: Job, k: int) -> Dict[str, Any]:
    """Adds ``env_restarted`` (and its mask) to the infos of a recreated actor."""
    if job.restarted:
        infos = dict(infos, env_restarted=np.ones(k, dtype=np.bool_),
                     _env_restarted=np.ones(k, dtype=np.bool_))
    return infos
