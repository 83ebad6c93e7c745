"""The gymnasium-style state machine of the vector envs, and their argument checks.

:class:`AsyncState` says which call is pending; :class:`StateChecks` holds the
checks that guard the API, shared (the same errors, word for word) by
:class:`~alf_env.front_ends.gym.vector_env.FastVectorEnv` and
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
from typing import Any, List, Optional, Sequence, Union

import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

__all__ = ["AsyncState", "Seeds", "StateChecks"]

#: What ``reset(seed=...)`` takes: ``None``, an int (env ``i`` gets
#: ``seed + i``) or one seed (or ``None``) per env.
Seeds = Union[None, int, Sequence[Optional[int]]]


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
