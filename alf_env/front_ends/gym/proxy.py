"""``GymProxy``: one gymnasium env in a worker process of its own, as a plain ``gymnasium.Env``.

The proxy composes a ``ProcessEnvironment``; the worker serves a :class:`ProxyHost`,
which holds the env. What it returns, forwards, raises and how it restarts, and
why a ``Box`` observation crosses in shared memory: docs/simulators.rst.
"""

import enum
import functools
import inspect
import pickle
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union, cast

import gymnasium as gym
import numpy as np
from absl import logging
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from alf_env.control_plane.channel import Promise
from alf_env.control_plane.guards import NotCopyable, OneThread, one_thread_at_a_time
from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.control_plane.remote import RemoteMethod
from alf_env.control_plane.restart import (
    RESTARTED_INFO_KEY,
    RestartBudget,
    RestartPolicy,
    describe_death,
)
from alf_env.control_plane.shutdown import close_when_collected
from alf_env.data_plane.shared_block import SharedBlock, copy_leaves
from alf_env.errors import (
    EnvironmentClosedAttributeError,
    EnvironmentClosedError,
    EnvTimeoutError,
    WorkerDiedError,
)

__all__ = ["GymProxy", "StepPromise", "ProxyHost", "Description", "IN_BLOCK"]

#: The one field of a proxy's shared block: the observation row.
_OBS_FIELD = "obs"


class _Marker(enum.Enum):
    """Sent for an observation written into the shared row (an enum: unpickled, the same)."""
    IN_BLOCK = "observation in the shared row"


IN_BLOCK = _Marker.IN_BLOCK


class Description(NamedTuple):
    """What a proxy reads once from its env when the worker starts."""
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    metadata: Dict[str, Any]
    render_mode: Optional[str]
    spec: Optional[EnvSpec]  # None also when the env's does not pickle


def _build_host(env_fn: Callable[[], Any]) -> "ProxyHost":
    """The worker's env constructor (it takes no ``env_id``, so ``env_fn`` gets no arguments)."""
    return ProxyHost(env_fn())


class ProxyHost:
    """What a proxy's worker serves: the env, and the shared row of its observations. Any
    name but ``step`` and ``reset`` is read from the env with ``get_wrapper_attr`` (a method
    answers ``RemoteMethod``); its own are prefixed ``_alf_env_``, never to hide the env's."""

    def __init__(self, env: Any) -> None:
        self._alf_env_env = env
        # [the row's view] once attached (copy_leaves takes a list of views).
        self._alf_env_row: Optional[List[np.ndarray]] = None
        self._alf_env_block: Optional[SharedBlock] = None

    def _alf_env_describe(self) -> Description:
        env = self._alf_env_env
        spec = getattr(env, "spec", None)
        try:
            pickle.dumps(spec)
        except Exception as exc:  # noqa: BLE001 -- any failure: the proxy has no spec
            logging.warning("GymProxy: the env's spec does not pickle (%s: %s); the "
                            "proxy's spec is None", type(exc).__name__, exc)
            spec = None
        return Description(env.observation_space, env.action_space,
                           dict(getattr(env, "metadata", {}) or {}),
                           getattr(env, "render_mode", None), spec)

    def _alf_env_attach(self, block: SharedBlock) -> None:
        """Maps the proxy's shared block: observations that fit its row go there."""
        self._alf_env_block = block
        self._alf_env_row = [block[_OBS_FIELD][0]]

    def _alf_env_unwrapped(self, name: str) -> Any:
        """``env.unwrapped.<name>`` (``_np_random``, which gymnasium's checker reads)."""
        return getattr(self._alf_env_env.unwrapped, name)

    def _observation_out(self, result: Any, size: int) -> Any:
        """``result`` (a tuple of ``size``), :data:`IN_BLOCK` for an observation put in the row."""
        row = self._alf_env_row
        if (row is not None and type(result) is tuple and len(result) == size
                and type(result[0]) is np.ndarray and copy_leaves(row, (result[0],))):
            return (IN_BLOCK,) + result[1:]
        return result

    def step(self, action: Any) -> Any:
        return self._observation_out(self._alf_env_env.step(action), 5)

    def reset(self, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None) -> Any:
        return self._observation_out(self._alf_env_env.reset(seed=seed, options=options), 2)

    def get_wrapper_attr(self, name: str) -> Any:
        value = self.__getattr__(name)
        return RemoteMethod(name) if inspect.ismethod(value) or inspect.isbuiltin(value) else value

    def set_wrapper_attr(self, name: str, value: Any, force: bool = True) -> bool:
        env = self._alf_env_env
        setter = getattr(env, "set_wrapper_attr", None)
        if setter is None:  # not a gymnasium.Env: what Env.set_wrapper_attr does
            if force or hasattr(env, name):
                setattr(env, name, value)
                return True
            return False
        return cast(bool, setter(name, value, force=force))

    def has_wrapper_attr(self, name: str) -> bool:
        env = self._alf_env_env
        checker = getattr(env, "has_wrapper_attr", None)
        return bool(checker(name)) if checker is not None else hasattr(env, name)

    def close(self) -> None:
        try:
            self._alf_env_env.close()
        finally:
            self._alf_env_row = None
            if self._alf_env_block is not None:
                self._alf_env_block.close()
                self._alf_env_block = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_alf_env_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        env = self._alf_env_env
        getter = getattr(env, "get_wrapper_attr", None)
        return getter(name) if getter is not None else getattr(env, name)


class _Pending:
    """A step or reset whose answer is not decoded yet (no reference to the proxy)."""

    __slots__ = ("kind", "promise", "death", "reset_args", "done", "value", "error")

    def __init__(self, kind: str, reset_args: Tuple[Any, ...]) -> None:
        self.kind = kind                  # "step" or "reset"
        self.reset_args = reset_args      # (seed, options) of a reset
        self.promise: Optional[Promise] = None  # the channel's Promise (None: not sent)
        self.death: Optional[WorkerDiedError] = None  # what kept it from being sent
        self.done = False
        self.value: Any = None
        self.error: Optional[BaseException] = None


class StepPromise:
    """The answer of ``GymProxy.step(action, blocking=False)``: call it for the 5-tuple
    (again: the same value or error)."""

    __slots__ = ("_proxy", "_pending")

    def __init__(self, proxy: "GymProxy", pending: _Pending) -> None:
        self._proxy = proxy
        self._pending = pending

    def __call__(self, timeout: Optional[float] = None) -> Any:
        """Waits for the step at most ``timeout`` seconds (``None``: the proxy's
        ``timeout``); past it ``EnvTimeoutError`` (call again to keep waiting)."""
        return self._proxy._finish(self._pending, timeout)


class GymProxy(NotCopyable, gym.Env):
    """One env in a worker process of its own, as a plain ``gymnasium.Env``.

    What it returns, forwards and raises, how it closes and restarts, and the
    arguments ``env_fn``, ``context`` and ``shared_memory``: docs/simulators.rst
    ("One env in its own process").

    Args:
        restart_policy: restart a worker that dies during ``step`` or ``reset``
            (``None``: a death raises ``WorkerDiedError``); a ``reset`` that saw
            the death is done again with its seed and options.
        timeout: seconds each answer of the worker may take (``None``: no limit;
            starting the worker is not bounded by it); past it ``EnvTimeoutError``.

    Raises:
        Exception: what the env constructor raised (its type, with the
            worker's traceback).
        WorkerDiedError: the worker died while building the env.
    """

    def __init__(self, env_fn: Callable[[], Any], *, context: Optional[str] = None,
                 restart_policy: Optional[RestartPolicy] = None,
                 timeout: Optional[float] = None, shared_memory: bool = True) -> None:
        if not callable(env_fn):
            raise TypeError(f"env_fn: expected a callable returning a gymnasium.Env, got "
                            f"{type(env_fn).__name__}")
        from alf_env.front_ends.gym.startup import resolve_context
        context = resolve_context(context)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: expected None or a positive number of seconds, "
                             f"got {timeout!r}")
        self._one_thread = OneThread("GymProxy")  # see one_thread_at_a_time below
        self._budget = RestartBudget(restart_policy, 1)
        self._host_fn = functools.partial(_build_host, env_fn)
        self._context = context
        self._timeout = timeout
        self._env_id = 0  # the id the worker's errors name
        self._closed = False
        self._gave_up: Optional[WorkerDiedError] = None  # the death past the budget
        self._pending: Optional[_Pending] = None
        self._block: Optional[SharedBlock] = None
        self._row: Optional[np.ndarray] = None
        self._finalizer: Optional["weakref.finalize[..., None]"] = None
        self._pe = self._new_worker()
        try:
            self._pe.wait_start()
            description: Description = self._pe.call("_alf_env_describe")(timeout)
            for name, value in description._asdict().items():  # the proxy's copies
                setattr(self, name, value)
            obs_space = self.observation_space
            if shared_memory and isinstance(obs_space, spaces.Box):
                self._block = SharedBlock([(_OBS_FIELD, obs_space.shape, obs_space.dtype)],
                                          num_rows=1, num_workers=1)
                self._row = self._block[_OBS_FIELD][0]
                self._pe.call("_alf_env_attach", self._block)(timeout)
        except BaseException:
            self.close()
            raise
        self._ready = True  # from now on, unknown attributes are the worker env's

    @classmethod
    def make(cls, env_id: Union[str, EnvSpec], *args: Any, context: Optional[str] = None,
             restart_policy: Optional[RestartPolicy] = None, timeout: Optional[float] = None,
             shared_memory: bool = True, **kwargs: Any) -> "GymProxy":
        """A proxy of ``gymnasium.make(env_id, *args, **kwargs)``, built in the worker."""
        return cls(functools.partial(gym.make, env_id, *args, **kwargs), context=context,
                   restart_policy=restart_policy, timeout=timeout, shared_memory=shared_memory)

    # -- the worker -----------------------------------------------------------
    def _new_worker(self) -> ProcessEnvironment:
        """Starts a worker (not waiting for its env); ends it if the proxy is collected."""
        pe = ProcessEnvironment(self._host_fn, env_id=self._env_id, torch_num_threads_per_env=None,
                                start_method=self._context, name="alf_env-proxy")
        pe.start(wait_to_start=False)
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = close_when_collected(self, [pe])
        return pe

    def _channel(self) -> ProcessEnvironment:
        if self._closed:
            raise EnvironmentClosedError(
                f"GymProxy of env {self._env_id} is closed; create a new one")
        if self._gave_up is not None:
            raise self._gave_up
        return self._pe

    @property
    def worker_pid(self) -> Optional[int]:
        """The worker process's id (``None`` once closed)."""
        return None if self._closed else self._pe.pid

    # -- gymnasium.Env --------------------------------------------------------
    def step(self, action: Any, blocking: bool = True) -> Any:
        """Steps the env in the worker: ``(observation, reward, terminated, truncated,
        info)`` as the env returned them, or with ``blocking=False`` at once a
        :class:`StepPromise` of them."""
        pending = self._send("step", action)
        return self._finish(pending, None) if blocking else StepPromise(self, pending)

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        """Resets the env in the worker; returns ``(observation, info)`` as the env did."""
        pending = self._send("reset", seed, options)
        return cast(Tuple[Any, Dict[str, Any]], self._finish(pending, None))

    def render(self) -> Any:
        """The env's ``render()`` in the worker (a frame is pickled back)."""
        return self._call_remote("render")

    def close(self) -> None:
        """Closes the env and ends the worker: idempotent, bounded, never raises."""
        if self._closed:
            return
        self._closed = True
        if self._finalizer is not None:
            self._finalizer.detach()
        self._pe.close()
        self._pending = None
        self._row = None
        if self._block is not None:
            self._block.close()

    @property
    def np_random(self) -> np.random.Generator:
        """The worker env's ``np_random`` (a copy; set it with ``proxy.np_random = ...``)."""
        return cast(np.random.Generator, self._read("np_random"))

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self.set_wrapper_attr("np_random", value)

    @property
    def np_random_seed(self) -> Optional[int]:  # type: ignore[override]
        """The worker env's ``np_random_seed``."""
        return cast(Optional[int], self._read("np_random_seed"))

    @property
    def _np_random(self) -> Optional[np.random.Generator]:  # type: ignore[override]
        """The worker's ``env.unwrapped._np_random`` (a copy), which gymnasium's checker reads."""
        return cast(Optional[np.random.Generator],
                    self._call_remote("_alf_env_unwrapped", "_np_random"))

    def get_wrapper_attr(self, name: str) -> Any:
        """The proxy's attribute ``name``, else the worker env's ``get_wrapper_attr(name)``."""
        return getattr(self, name)

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        """Calls ``set_wrapper_attr(name, value, force=force)`` on the worker's env (and
        sets the proxy's copy of an attribute it read at start)."""
        done: bool = self._call_remote("set_wrapper_attr", name, value, force=force)
        if done and name in Description._fields:
            setattr(self, name, value)
        return done

    def has_wrapper_attr(self, name: str) -> bool:
        """Whether the proxy or the worker's env has attribute ``name``."""
        return (name in self.__dict__ or hasattr(type(self), name)
                or cast(bool, self._call_remote("has_wrapper_attr", name)))

    def __getattr__(self, name: str) -> Any:
        """The worker env's attribute ``name`` (a method: a callable that runs there)."""
        if (name.startswith("__") and name.endswith("__")) or "_ready" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if self._closed:
            raise EnvironmentClosedAttributeError(
                f"GymProxy of env {self._env_id} is closed: its attribute {name!r} cannot "
                f"be read; create a new one")
        return self._read(name)

    def __repr__(self) -> str:
        spec_id = getattr(self.__dict__.get("spec"), "id", None)
        what = f"{spec_id}, " if spec_id else ""
        return f"<GymProxy({what}env {self._env_id}, pid {self.worker_pid})>"

    __str__ = __repr__

    # -- requests -------------------------------------------------------------
    def _read(self, name: str) -> Any:
        value = self._call_remote("get_wrapper_attr", name)
        return (functools.partial(self._call_remote, value.name)
                if isinstance(value, RemoteMethod) else value)

    def _call_remote(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self._settle()
        return self._channel().call(name, *args, **kwargs)(self._timeout)

    def _send(self, kind: str, *args: Any) -> _Pending:
        """Sends a step or a reset; the answer is decoded by :meth:`_finish`."""
        self._settle()
        pe = self._channel()
        pending = _Pending(kind, args if kind == "reset" else (None, None))
        try:
            pending.promise = pe.call(kind, *args)
        except WorkerDiedError as death:
            pending.death = death
        self._pending = pending
        return pending

    def _settle(self) -> None:
        """Decodes an outstanding step first: the next would overwrite its shared row."""
        pending = self._pending
        if pending is not None and not pending.done:
            try:
                self._finish(pending, None)
            except EnvTimeoutError:
                raise  # still owed: nothing more may be sent
            except Exception:  # noqa: BLE001 -- kept; the step's promise raises it
                pass

    def _finish(self, pending: _Pending, timeout: Optional[float]) -> Any:
        """The decoded answer of ``pending`` (restarting a dead worker if allowed)."""
        if not pending.done:
            try:
                pending.value = self._answer(pending, timeout)
            except EnvTimeoutError:
                raise  # not decoded yet: a later call waits again
            except Exception as exc:  # noqa: BLE001 -- kept: the promise raises it again
                pending.error = exc
            pending.done = True
            if self._pending is pending:
                self._pending = None
        if pending.error is not None:
            raise pending.error
        return pending.value

    def _answer(self, pending: _Pending, timeout: Optional[float]) -> Any:
        try:
            if pending.death is not None:
                raise pending.death
            assert pending.promise is not None  # sent: no death kept it back
            result = pending.promise(self._timeout if timeout is None else timeout)
        except WorkerDiedError as death:
            if not self._budget.enabled or self._closed:
                raise
            obs, info = self._restart(death, *pending.reset_args)
            return (obs, info) if pending.kind == "reset" else (obs, 0.0, False, True, info)
        return self._decode(result)

    def _decode(self, result: Any) -> Any:
        """A step's or reset's answer with the observation read from the shared row."""
        if type(result) is tuple and result and result[0] is IN_BLOCK:
            assert self._row is not None  # IN_BLOCK only comes with a shared row
            return (self._row.copy(),) + result[1:]
        return result

    # A second thread is refused before it touches the outstanding step (the
    # requests and the waits below all start with one of these).
    _send = one_thread_at_a_time(_send, "a request")
    _settle = one_thread_at_a_time(_settle, "a request")
    _finish = one_thread_at_a_time(_finish, "waiting for an answer")

    # -- restarts -------------------------------------------------------------
    def _restart(self, death: WorkerDiedError, seed: Optional[int],
                 options: Optional[Dict[str, Any]]) -> Tuple[Any, Dict[str, Any]]:
        """Replaces the dead worker and resets its env; each try counts against the budget."""
        budget = self._budget
        last: BaseException = death
        while budget.allows(0):
            budget.spend(0, [self._env_id], describe_death(last))
            try:
                obs, info = self._rebuild(seed, options)
            except Exception as exc:  # noqa: BLE001 -- counted; tried again or raised
                logging.warning("GymProxy of env %s: the restarted worker failed: %s: %s",
                                self._env_id, type(exc).__name__, exc)
                last = exc
                if isinstance(exc, WorkerDiedError):
                    death = exc
                continue
            return obs, {**info, RESTARTED_INFO_KEY: True}
        self._gave_up = death
        if last is not death:
            raise death from last
        raise death

    def _rebuild(self, seed: Optional[int],
                 options: Optional[Dict[str, Any]]) -> Tuple[Any, Dict[str, Any]]:
        """A new worker from the same constructor, its spaces checked, attached and reset."""
        self._pe.close()
        self._pending = None
        self._pe = pe = self._new_worker()
        pe.wait_start(self._budget.start_timeout)  # past it: EnvTimeoutError, ended
        new: Description = pe.call("_alf_env_describe")(self._timeout)
        if (new.observation_space, new.action_space) != (self.observation_space, self.action_space):
            raise RuntimeError(
                f"GymProxy of env {self._env_id}: the restarted env has observation space "
                f"{new.observation_space} and action space {new.action_space}; expected "
                f"those of the first, {self.observation_space} and {self.action_space}")
        if self._block is not None:
            pe.call("_alf_env_attach", self._block)(self._timeout)
        obs, info = self._decode(pe.call("reset", seed, options)(self._timeout))
        return obs, info
