"""The ALF environment interface, :class:`AlfEnvironment` (docs/contract.rst, "Environments")."""

import abc
from typing import Any, List, Optional

from alf_env.data_structures import TimeStep, time_step_spec
from alf_env.errors import EnvironmentClosedError
from alf_env.tensor_specs import TensorSpec

__all__ = ["AlfEnvironment"]


def forward_attribute(wrapper: Any, inner_name: str, name: str) -> Any:
    """``getattr(wrapper.<inner_name>, name)`` for a public ``name`` (for ``__getattr__``).

    Private names, and a wrapper whose inner object is not set yet (while unpickling),
    raise ``AttributeError``, so ``__getattr__`` never recurses.
    """
    inner = None if name.startswith("_") else wrapper.__dict__.get(inner_name)
    if inner is None:
        raise AttributeError(name)
    return getattr(inner, name)


class AlfEnvironment(abc.ABC):
    """Abstract base class of ALF environments: subclasses implement ``_reset``, ``_step``
    and the spec methods.

    Example::

        with SomeEnvironment() as env:
            time_step = env.reset()
            while not time_step.is_last():
                time_step = env.step(policy(time_step))
    """

    def __init__(self) -> None:
        self._current_time_step: Optional[TimeStep] = None
        self._closed = False

    @property
    def batched(self) -> bool:
        """Whether inputs and outputs carry a leading batch dimension."""
        return False

    @property
    def batch_size(self) -> int:
        """The batch dimension of a batched env (which must override this); 1 if unbatched."""
        if self.batched:
            raise RuntimeError(f"{type(self).__name__} is batched but does not override batch_size")
        return 1

    @property
    def is_tensor_based(self) -> bool:
        """Whether the env returns torch tensors (``False``: numpy arrays)."""
        return False

    @property
    def num_tasks(self) -> int:
        """How many tasks the env has (ALF's multi-task interface); 1 by default."""
        return 1

    @property
    def task_names(self) -> List[str]:
        """The name of each task: ``["0", ..., str(num_tasks - 1)]`` by default (as ALF)."""
        return [str(i) for i in range(self.num_tasks)]

    @abc.abstractmethod
    def observation_spec(self) -> Any:
        """The nest of ``TensorSpec`` describing one observation."""

    @abc.abstractmethod
    def action_spec(self) -> Any:
        """The nest of ``TensorSpec`` describing one action."""

    def reward_spec(self) -> TensorSpec:
        """The spec of one reward; a float32 scalar by default."""
        return TensorSpec(())

    def env_info_spec(self) -> Any:
        """The nest of specs of ``TimeStep.env_info``; ``{}`` by default."""
        return {}

    def time_step_spec(self) -> TimeStep:
        """The ``TimeStep`` of specs of one (unbatched) time step."""
        return time_step_spec(self.observation_spec(), self.action_spec(),
                              self.reward_spec(), self.env_info_spec())

    def current_time_step(self) -> Optional[TimeStep]:
        """The last ``TimeStep`` returned, or ``None`` before the first reset."""
        return getattr(self, "_current_time_step", None)

    def reset(self) -> TimeStep:
        """Starts a new episode and returns its ``FIRST`` time step.

        Raises:
            EnvironmentClosedError: if the env was closed.
        """
        self._check_not_closed()
        self._current_time_step = self._reset()
        return self._current_time_step

    def step(self, action: Any) -> TimeStep:
        """Applies ``action`` and returns the next time step.

        Before the first ``reset()``, and after a ``LAST`` step, this resets instead and
        ignores ``action``.

        Args:
            action: a nest matching ``action_spec()`` (with a leading batch dimension when
                ``batched``).

        Raises:
            EnvironmentClosedError: if the env was closed.
        """
        self._check_not_closed()
        if not self._has_time_step():
            return self.reset()
        self._current_time_step = self._step(action)
        return self._current_time_step

    def _has_time_step(self) -> bool:
        """Whether a time step was made (:meth:`step` resets if not); cheaper when overridden."""
        return self.current_time_step() is not None

    @abc.abstractmethod
    def _reset(self) -> TimeStep:
        """Subclass hook of :meth:`reset`."""

    @abc.abstractmethod
    def _step(self, action: Any) -> TimeStep:
        """Subclass hook of :meth:`step`; reset (ignoring action) after LAST."""

    def sync_progress(self, progress: Any = None) -> None:  # noqa: B027 -- optional hook
        """Receives the trainer's training progress (ALF's hook); does nothing by default."""

    def get_info(self) -> Any:
        """The env's info of the last step (ALF's interface), if the subclass supports it."""
        raise NotImplementedError(f"{type(self).__name__} does not support get_info()")

    def seed(self, seed: Any) -> None:
        """Seeds the env's RNGs if supported (the batched envs of workers take one per env)."""
        raise NotImplementedError(f"{type(self).__name__} does not support seed()")

    def render(self, mode: str = "rgb_array") -> Any:
        """Renders the env if supported; ``'rgb_array'`` gives an ``[H, W, 3]`` uint8 array."""
        raise NotImplementedError(f"{type(self).__name__} does not support render()")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return getattr(self, "_closed", False)

    def close(self) -> None:
        """Frees the env's resources; idempotent."""
        if not self.closed:
            self._closed = True
            self._close()

    def _close(self) -> None:  # noqa: B027 -- optional hook
        """Subclass hook of :meth:`close`, called once."""

    def _check_not_closed(self) -> None:
        if self.closed:
            raise EnvironmentClosedError(
                f"{type(self).__name__} is closed; create a new environment")

    def __enter__(self) -> "AlfEnvironment":
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        self.close()
