"""The gymnasium-style state machine of the vector envs, and their argument checks.

:class:`CallState` says which call is pending (an :class:`AsyncState`), what
broke the env, and holds the checks that guard the API; :class:`VectorApi`
holds the gymnasium methods written in terms of the others. Both serve
:class:`~alf_env.front_ends.gym.vector_env.FastVectorEnv` and
:class:`~alf_env.front_ends.ray.vector_env.RayVectorEnv` (the same errors,
word for word)::

    DEFAULT --reset_async--> WAITING_RESET --reset_wait--> DEFAULT
    DEFAULT --step_async---> WAITING_STEP  --step_wait---> DEFAULT
    DEFAULT --call_async---> WAITING_CALL  --call_wait---> DEFAULT

Any other ``*_async`` while not DEFAULT raises ``AlreadyPendingCallError``; a
``*_wait`` without its ``*_async`` raises ``NoAsyncCallError``; anything after
``close()`` raises ``ClosedEnvironmentError``. A ``*_wait`` that times out
raises :class:`~alf_env.errors.EnvTimeoutError` and keeps its state, so it
can be called again (nothing is lost; gymnasium instead forgets the call).
A worker exception returns to DEFAULT and is re-raised with its type and
worker traceback; a dead worker raises ``WorkerDiedError``, and so does every
later call but ``close()``.
"""

import enum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

from alf_env.control_plane.channel import resolve_all
from alf_env.errors import EnvTimeoutError, WorkerDiedError

__all__ = ["AsyncState", "Seeds", "Step", "CallState", "VectorApi"]

#: What ``step`` returns: ``(obs, rewards, terminated, truncated, infos)``.
Step = Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]

#: What ``reset(seed=...)`` takes: ``None``, an int (env ``i`` gets
#: ``seed + i``) or one seed (or ``None``) per env.
Seeds = Union[None, int, Sequence[Optional[int]]]

_Env = TypeVar("_Env", bound="VectorApi")
_T = TypeVar("_T")


class AsyncState(enum.Enum):
    """Which gymnasium-style call is pending (values as in gymnasium's AsyncState)."""
    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


class CallState:
    """The pending call of a vector env, what broke it, and the checks of its API.

    Args:
        owner: the class name the errors give (``"FastVectorEnv"``).
        num_envs: the number of envs (for the seed and mask checks).
        is_async: whether the env runs in the asynchronous (EnvPool) mode.
        broken_by: where the error that broke the env comes from, when
            something else than :meth:`guard` records it (e.g. a Ray actor
            group); default: what :meth:`guard` and :meth:`resolve` recorded.
    """

    def __init__(self, owner: str, num_envs: int, is_async: bool,
                 broken_by: Optional[Callable[[], Optional[BaseException]]] = None) -> None:
        self.owner = owner
        self.num_envs = num_envs
        self.is_async = is_async
        #: The pending call.
        self.pending = AsyncState.DEFAULT
        #: Set by :meth:`close`: every later check raises ``ClosedEnvironmentError``.
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

    # -- the state checks ---------------------------------------------------------

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
        """Checks that ``what`` (a call that starts something) may run now."""
        self.check_running()
        self.check_idle(what)

    def check_waiting(self, state: AsyncState, what: str, pair: str) -> None:
        """Checks that a ``*_wait`` call may run: the env is open and ``pair`` was called."""
        self.check_running()
        if self.pending is not state:
            raise NoAsyncCallError(f"Calling `{what}` without any prior call to `{pair}`.",
                                   state.value)

    # -- running what may fail ------------------------------------------------------

    def guard(self, fn: Callable[[], _T]) -> _T:
        """Runs a post or a wait: a dead worker breaks the env; any other error
        but a timeout (after which waiting again picks the call up) ends the call."""
        try:
            return fn()
        except WorkerDiedError as exc:
            self._broken = exc
            self.pending = AsyncState.DEFAULT
            raise
        except EnvTimeoutError:
            raise
        except BaseException:
            self.pending = AsyncState.DEFAULT
            raise

    def resolve(self, promises: List[Any], timeout: Optional[float],
                during: str = "a call") -> List[Any]:
        """Waits for every promise together (``resolve_all``); a dead worker breaks the env."""
        try:
            return resolve_all(promises, timeout, during)
        except WorkerDiedError as exc:
            self._broken = exc
            raise

    def break_with(self, error: BaseException) -> None:
        """Records ``error`` (a dead worker) as what broke the env."""
        self._broken = error

    # -- the argument checks --------------------------------------------------------

    def seed_list(self, seed: Seeds) -> List[Optional[int]]:
        """One seed per env: ``seed + i`` for an int, ``None`` for ``None``."""
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"seed: expected an int or a list of num_envs={self.num_envs} "
                             f"seeds, got a list of {len(seeds)}")
        return seeds

    def check_reset_mask(self, mask: Any) -> np.ndarray:
        """gymnasium's checks of ``options["reset_mask"]``, with its types and words."""
        if self.is_async:
            raise ValueError("options['reset_mask']: the asynchronous mode resets every "
                             "env; reset_mask needs batch_size == num_envs")
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
        if mask.shape != (self.num_envs,):
            raise ValueError(f"`options['reset_mask']` must have shape `({self.num_envs},)`, "
                             f"got {mask.shape}")
        if mask.dtype != np.bool_:
            raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got "
                            f"{mask.dtype}")
        if not mask.any():
            raise ValueError(f"`options['reset_mask']` must contain a boolean array with at "
                             f"least one True value, got reset_mask={mask}")
        return mask

    def reset_arguments(self, seed: Seeds, options: Optional[Dict[str, Any]]
                        ) -> Tuple[List[Optional[int]], Optional[Dict[str, Any]],
                                   Optional[np.ndarray]]:
        """Checks ``reset_async``'s arguments: returns one seed per env, a copy of
        ``options`` without its ``"reset_mask"`` (the caller's stays intact) and
        the checked mask (``None``: every env)."""
        self.check_running()
        seeds = self.seed_list(seed)
        self.check_idle("reset_async")
        options = None if options is None else dict(options)
        mask = None
        if options is not None and "reset_mask" in options:
            mask = self.check_reset_mask(options.pop("reset_mask"))
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
    """The vector env methods written in terms of the others, and the documented
    API both vector envs implement (a mixin of methods only: it reads no attribute).

    The class using it implements ``reset_async``/``reset_wait``,
    ``step_async``/``step_wait``, ``call_async``/``call_wait``, the EnvPool
    methods ``async_reset``/``send``/``recv`` and ``close``; the docstrings
    here are theirs.
    """

    def reset(self, *, seed: Seeds = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        """Resets the envs; returns the batched observations and infos.

        Args:
            seed: ``None`` (unseeded), an int (env ``i`` gets ``seed + i``) or
                one seed (or ``None``) per env.
            options: passed to every env's ``reset``; a ``"reset_mask"`` entry
                (bool array of ``num_envs``) resets only those envs
                (synchronous mode).
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """Calls method ``name`` (or reads the attribute) of every env; a tuple."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def get_attr(self, name: str) -> Tuple[Any, ...]:
        """Attribute ``name`` of every env (a method is called without arguments)."""
        return self.call(name)

    def render(self) -> Tuple[Any, ...]:
        """The frames of every env (``env.render()``), as a tuple."""
        return self.call("render")

    def __enter__(self: _Env) -> _Env:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- implemented by the class using the mixin -------------------------------------

    def reset_async(self, seed: Seeds = None,
                    options: Optional[Dict[str, Any]] = None) -> None:
        """Posts the resets (see :meth:`reset`); collect them with :meth:`reset_wait`."""
        raise NotImplementedError

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        """Waits for the resets posted by :meth:`reset_async`.

        Raises:
            NoAsyncCallError: no reset is pending.
            EnvTimeoutError: ``timeout`` passed (call again to keep waiting).
        """
        raise NotImplementedError

    def step_wait(self, timeout: Optional[float] = None) -> Step:
        """Waits for the steps posted by ``step_async``.

        Raises:
            NoAsyncCallError: no step is pending.
            EnvTimeoutError: ``timeout`` passed (call again to keep waiting).
        """
        raise NotImplementedError

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Sends :meth:`call` to the workers; collect with :meth:`call_wait`."""
        raise NotImplementedError

    def call_wait(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        """The results of the pending :meth:`call_async`, one per env.

        Raises:
            NoAsyncCallError: no call is pending.
            EnvTimeoutError: ``timeout`` passed (call again to keep waiting).
        """
        raise NotImplementedError

    def async_reset(self) -> None:
        """Resets every env; their first observations come out of :meth:`recv`."""
        raise NotImplementedError

    def send(self, actions: Any, env_ids: Any) -> None:
        """Steps the envs ``env_ids`` with ``actions`` (batched in the order of the ids).

        Raises:
            ValueError: bad ids (out of range, repeated, not whole workers or
                actors, or still in flight) or a malformed action; nothing was sent.
        """
        raise NotImplementedError

    def recv(self, timeout: Optional[float] = None) -> Step:
        """The first ``batch_size`` envs to finish: ``(obs, rewards, terminated,
        truncated, info)`` with ``info["env_id"]``, rows in completion order
        (whole workers or actors).

        Raises:
            NoAsyncCallError: fewer than ``batch_size`` envs are in flight.
            EnvTimeoutError: ``timeout`` passed (nothing is lost).
        """
        raise NotImplementedError

    close: Any  # gymnasium's VectorEnv.close
