"""The gymnasium-style state machine of the vector envs, and their argument checks.

:class:`AsyncState` says which call is pending; :class:`StateChecks` holds the
checks that guard the API, and :class:`VectorApi` the gymnasium and EnvPool
methods written in terms of the others, both shared (the same errors, word for
word) by :class:`~alf_env.front_ends.gym.vector_env.FastVectorEnv` and
:class:`~alf_env.front_ends.ray.vector_env.RayVectorEnv`::

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
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

__all__ = ["AsyncState", "Seeds", "StateChecks", "VectorApi"]

#: What ``reset(seed=...)`` takes: ``None``, an int (env ``i`` gets
#: ``seed + i``) or one seed (or ``None``) per env.
Seeds = Union[None, int, Sequence[Optional[int]]]

_Env = TypeVar("_Env", bound="VectorApi")


class AsyncState(enum.Enum):
    """Which gymnasium-style call is pending (values as in gymnasium's AsyncState)."""
    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


class StateChecks:
    """The checks of the state machine and of the reset arguments (a mixin).

    The class using it provides ``closed`` (gymnasium's ``VectorEnv``),
    ``_broken`` (the error that broke the env, or ``None``), ``_state`` (an
    :class:`AsyncState`), ``num_envs`` and ``is_async``.
    """

    closed: bool
    _broken: Optional[BaseException]
    _state: AsyncState
    num_envs: int
    is_async: bool

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(
                f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
        if self._broken is not None:
            raise self._broken

    def _assert_state(self, what: str) -> None:
        if self._state is not AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{what}` while waiting for a pending call to "
                f"`{self._state.value}` to complete.", self._state.value)

    def _assert_waiting(self, state: AsyncState, what: str, pair: str) -> None:
        """Checks that a ``*_wait`` call may run: the env is open and ``pair`` was called."""
        self._assert_is_running()
        if self._state is not state:
            raise NoAsyncCallError(f"Calling `{what}` without any prior call to `{pair}`.",
                                   state.value)

    def _seed_list(self, seed: Seeds) -> List[Optional[int]]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"seed: expected an int or a list of num_envs={self.num_envs} "
                             f"seeds, got a list of {len(seeds)}")
        return seeds

    def _check_reset_mask(self, mask: Any) -> np.ndarray:
        if self.is_async:
            raise ValueError("options['reset_mask']: the asynchronous mode resets every "
                             "env; reset_mask needs batch_size == num_envs")
        # gymnasium's checks, types and words (AsyncVectorEnv.reset_async).
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

    def _reset_arguments(self, seed: Seeds, options: Optional[Dict[str, Any]]
                         ) -> Tuple[List[Optional[int]], Optional[Dict[str, Any]],
                                    Optional[np.ndarray]]:
        """Checks ``reset_async``'s arguments: returns one seed per env, a copy of
        ``options`` without its ``"reset_mask"`` (the caller's stays intact) and
        the checked mask (``None``: every env)."""
        self._assert_is_running()
        seeds = self._seed_list(seed)
        self._assert_state("reset_async")
        options = None if options is None else dict(options)
        mask = None
        if options is not None and "reset_mask" in options:
            mask = self._check_reset_mask(options.pop("reset_mask"))
        return seeds, options, mask

    def _attr_values(self, name: str, values: Any) -> List[Any]:
        """Checks ``set_attr``'s arguments: returns one value per env."""
        self._assert_is_running()
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr({name!r}): expected {self.num_envs} values (one "
                             f"per env), got {len(values)}")
        self._assert_state("set_attr")
        return list(values)

    def _no_recv_yet(self) -> NoAsyncCallError:
        """The error of ``step`` in the asynchronous mode before any ``recv``."""
        return NoAsyncCallError("step() in the asynchronous mode steps the envs of the "
                                "last recv(); call reset() first", "step")


class VectorApi(StateChecks):
    """The vector env methods written in terms of the others (a mixin).

    The class using it provides what :class:`StateChecks` needs,
    ``reset_async``/``reset_wait``, ``call_async``/``call_wait`` and ``close``.
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

    # Provided by the class using the mixin.
    reset_async: Any
    reset_wait: Any
    call_async: Any
    call_wait: Any
    close: Any
