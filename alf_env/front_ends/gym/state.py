"""The gymnasium-style state machine of the vector envs, and their argument checks.

Shared by ``FastVectorEnv`` and ``RayVectorEnv``, so both raise the same errors::

    DEFAULT --reset_async--> WAITING_RESET --reset_wait--> DEFAULT
    DEFAULT --step_async---> WAITING_STEP  --step_wait---> DEFAULT
    DEFAULT --call_async---> WAITING_CALL  --call_wait---> DEFAULT

Unlike gymnasium, a ``*_wait`` that times out keeps its state, so waiting again
loses nothing (``docs/contract.rst``, "Errors").
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import numpy.typing as npt
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

# The pending call, with gymnasium's own enum: one name for one concept, and a
# user's comparison with gymnasium's members holds.
from gymnasium.vector.async_vector_env import AsyncState

from alf_env.control_plane.channel import Promise, resolve_all
from alf_env.errors import EnvTimeoutError, WorkerDiedError

__all__ = ["AsyncState", "Seeds", "Step", "CallState", "VectorApi"]

#: What ``step`` returns: ``(obs, rewards, terminated, truncated, infos)``.
Step = Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]

#: What ``reset(seed=...)`` takes: ``None``, an int (env ``i`` gets
#: ``seed + i``) or one seed (or ``None``) per env.
Seeds = Union[None, int, Sequence[Optional[int]]]

_Env = TypeVar("_Env", bound="VectorApi")
_T = TypeVar("_T")


class CallState:
    """The pending call of a vector env, what broke it, and the checks of its API
    (``broken_by``: what broke it when another records it, a Ray actor group)."""

    def __init__(self, owner: str, num_envs: int, is_async: bool,
                 broken_by: Optional[Callable[[], Optional[BaseException]]] = None) -> None:
        self.owner = owner
        self.num_envs = num_envs
        self.is_async = is_async
        self.pending = AsyncState.DEFAULT
        self.closed = False
        self._broken: Optional[BaseException] = None
        self._broken_by = broken_by

    @property
    def broken(self) -> Optional[BaseException]:
        """The error that broke the env (only ``close()`` works then), or ``None``."""
        return self._broken if self._broken_by is None else self._broken_by()

    def close(self) -> AsyncState:
        """Marks the env closed; returns the call that was pending (now dropped)."""
        pending, self.pending, self.closed = self.pending, AsyncState.DEFAULT, True
        return pending

    def check_running(self) -> None:
        """Raises if the env was closed, or broken by a dead worker."""
        if self.closed:
            raise ClosedEnvironmentError(
                f"Trying to operate on `{self.owner}`, after a call to `close()`.")
        broken = self.broken
        if broken is not None:
            raise broken

    def check_idle(self, what: str) -> None:
        """Raises ``AlreadyPendingCallError`` if a call is pending (before ``what``)."""
        if self.pending is not AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{what}` while waiting for a pending call to "
                f"`{self.pending.value}` to complete.", self.pending.value)

    def check_ready(self, what: str) -> None:
        self.check_running()
        self.check_idle(what)

    def check_waiting(self, state: AsyncState, what: str, pair: str) -> None:
        """Checks that ``what`` (a ``*_wait``) may run: ``pair`` was called."""
        self.check_running()
        if self.pending is not state:
            raise NoAsyncCallError(f"Calling `{what}` without any prior call to `{pair}`.",
                                   state.value)

    def guard(self, fn: Callable[[], _T]) -> _T:
        """Runs a post or a wait: a dead worker breaks the env; any other error
        but a timeout (waiting again picks the call up) ends the call."""
        try:
            return fn()
        except BaseException as exc:
            if isinstance(exc, WorkerDiedError):
                self._broken = exc
            if not isinstance(exc, EnvTimeoutError):
                self.pending = AsyncState.DEFAULT
            raise

    def resolve(self, promises: Sequence[Promise], timeout: Optional[float],
                during: str = "a call") -> List[Any]:
        """Waits for every promise together (``resolve_all``); a dead worker breaks the env."""
        try:
            return resolve_all(promises, timeout, during)
        except WorkerDiedError as exc:
            self._broken = exc
            raise

    def break_with(self, error: BaseException) -> None:
        self._broken = error

    def reset_arguments(self, seed: Seeds, options: Optional[Dict[str, Any]]
                        ) -> Tuple[List[Optional[int]], Optional[Dict[str, Any]],
                                   Optional[np.ndarray]]:
        """``reset_async``'s arguments, checked: one seed per env (``seed + i`` for an
        int), a copy of ``options`` without ``"reset_mask"`` (the caller's dict
        stays intact), the mask (``None``: all; gymnasium's checks, types and words)."""
        self.check_running()
        n = self.num_envs
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds: List[Optional[int]] = [None if seed is None else int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed: expected an int or a list of num_envs={n} seeds, "
                                 f"got a list of {len(seeds)}")
        self.check_idle("reset_async")
        options = None if options is None else dict(options)
        if options is None or "reset_mask" not in options:
            return seeds, options, None
        mask = options.pop("reset_mask")
        if self.is_async:
            raise ValueError("options['reset_mask']: the asynchronous mode resets every "
                             "env; reset_mask needs batch_size == num_envs")
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
        if mask.shape != (n,):
            raise ValueError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
        if mask.dtype != np.bool_:
            raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
        if not mask.any():
            raise ValueError(f"`options['reset_mask']` must contain a boolean array with at "
                             f"least one True value, got reset_mask={mask}")
        return seeds, options, mask

    def attr_values(self, name: str, values: Any) -> List[Any]:
        """Checks ``set_attr``'s arguments: returns one value per env."""
        self.check_running()
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr({name!r}): expected {self.num_envs} values (one "
                             f"per env), got {len(values)}")
        self.check_idle("set_attr")
        return list(values)

    @staticmethod
    def no_recv_yet() -> NoAsyncCallError:
        """The error of ``step`` in the asynchronous mode before any ``recv``."""
        return NoAsyncCallError("step() in the asynchronous mode steps the envs of the "
                                "last recv(); call reset() first", "step")


class VectorApi:
    """The documented API of both vector envs (a mixin of methods only: it reads no
    attribute); the states and errors of every call: ``docs/contract.rst``."""

    def reset(self, *, seed: Seeds = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        """Resets the envs.

        Args:
            seed: ``None``, an int (env ``i`` gets ``seed + i``) or one per env.
            options: passed to every env's ``reset``; a ``"reset_mask"`` (bool array,
                synchronous mode) resets only those envs.

        Returns:
            ``(observations, infos)``, batched.

        Raises:
            ValueError: a ``seed`` list not of ``num_envs``, or a bad ``reset_mask``.
            TypeError: a ``reset_mask`` that is not a bool numpy array.
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """Calls method ``name`` of every env: a tuple, one result per env (or its value)."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def get_attr(self, name: str) -> Tuple[Any, ...]:
        """Attribute ``name`` of every env, a tuple (a method is called without arguments)."""
        return self.call(name)

    def render(self) -> Tuple[Any, ...]:
        """The frames of every env (``env.render()``), as a tuple."""
        return self.call("render")

    def __enter__(self: _Env) -> _Env:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- implemented by the class using the mixin -------------------------------------
    def reset_async(self, seed: Seeds = None, options: Optional[Dict[str, Any]] = None) -> None:
        """Posts the resets (arguments as :meth:`reset`); collect with :meth:`reset_wait`."""
        raise NotImplementedError

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        """Waits for the resets of :meth:`reset_async`: ``(observations, infos)``, batched."""
        raise NotImplementedError

    def step_wait(self, timeout: Optional[float] = None) -> Step:
        """Waits for the steps of ``step_async``: the 5-tuple of ``step``, batched."""
        raise NotImplementedError

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Sends :meth:`call` to the workers; collect with :meth:`call_wait`."""
        raise NotImplementedError

    def call_wait(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        """Waits for the pending :meth:`call_async`: one result per env, a tuple."""
        raise NotImplementedError

    def async_reset(self) -> None:
        """Resets every env; their first observations come out of :meth:`recv`."""
        raise NotImplementedError

    def send(self, actions: Any, env_ids: npt.ArrayLike) -> None:
        """Starts a step of the envs ``env_ids`` (EnvPool mode); collect with :meth:`recv`.

        Args:
            actions: one per env of ``env_ids``, batched in the order of the ids.
            env_ids: whole workers (or actors) of envs, none still in flight.

        Raises:
            ValueError: bad ids (out of range, repeated, not whole workers or
                actors, or still in flight) or a malformed action; nothing was sent.
        """
        raise NotImplementedError

    def recv(self, timeout: Optional[float] = None) -> Step:
        """Waits at most ``timeout`` seconds for the first ``batch_size`` envs to finish.

        Returns:
            The 5-tuple of ``step`` for those envs, in completion order (whole
            workers or actors), with their ids in ``info["env_id"]``.

        Raises:
            NoAsyncCallError: fewer than ``batch_size`` envs are in flight.
            EnvTimeoutError: ``timeout`` passed (nothing is lost).
        """
        raise NotImplementedError

    close: Callable[..., None]  # gymnasium's VectorEnv.close
