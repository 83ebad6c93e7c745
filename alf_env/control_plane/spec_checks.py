"""Checking actions and time steps against an ALF env's specs, where the mistake is made:
actions cast under numpy's ``"safe"`` rule, never clipped (docs/contract.rst, "Errors");
time steps convert under ``"same_kind"``, as the shared-memory path's rows do."""

import functools
import sys
from typing import Any, List, Literal, Optional, Sequence, Tuple

import numpy as np

from alf_env import nest

__all__ = ["ActionChecker", "TimeStepChecker", "WorkerSpecGuard", "time_step_leaf_error"]

_ALF_ENVIRONMENT_MODULE = "alf_env.environments.alf_environment"

# The spec kinds a "weak" (NEP 50) Python scalar fits.
_WEAK_KINDS = {bool: "biufc", int: "iufc", float: "fc"}

Shape = Tuple[int, ...]


@functools.lru_cache(maxsize=None)
def can_cast(source: np.dtype, target: np.dtype, casting: Literal["safe", "same_kind"]) -> bool:
    """``np.can_cast``, cached: it is slow, and every step asks it per leaf."""
    return bool(np.can_cast(source, target, casting=casting))


def _tensor_view(leaf: Any) -> Optional[np.ndarray]:
    """The tensor ``leaf``'s numpy view (half ``detach().cpu().numpy()``'s cost), or ``None``."""
    try:
        view: np.ndarray = leaf.numpy()
        return view
    except (RuntimeError, TypeError):
        return None


def _is_tensor(leaf: Any) -> bool:
    """Whether ``leaf`` is a torch tensor, without importing torch."""
    return type(leaf).__module__ == "torch" and hasattr(leaf, "detach")


def _shape_and_dtype(leaf: Any) -> Tuple[Shape, np.dtype]:
    """The shape and numpy dtype of an array, tensor, scalar or array-like."""
    if isinstance(leaf, np.ndarray):
        return leaf.shape, leaf.dtype
    if isinstance(leaf, np.generic):
        return (), leaf.dtype
    if type(leaf).__module__ == "torch" and hasattr(leaf, "dtype"):
        from alf_env.dtypes import torch_dtype_to_numpy
        return tuple(leaf.shape), torch_dtype_to_numpy(leaf.dtype)
    array = np.asarray(leaf)
    return array.shape, array.dtype


def time_step_leaf_error(env_id: Any, path: str, shape: Shape, dtype: np.dtype,
                         expected_shape: Shape, expected_dtype: np.dtype) -> ValueError:
    """The error for a time step leaf that does not fit its spec."""
    if tuple(shape) != tuple(expected_shape):
        return ValueError(f"env {env_id} returned time_step.{path} of shape {tuple(shape)} and "
                          f"dtype {dtype}; its spec expects shape {tuple(expected_shape)} and "
                          f"dtype {expected_dtype}")
    return ValueError(f"env {env_id} returned time_step.{path} of dtype {dtype}, which does not "
                      f"convert to the spec's {expected_dtype} (numpy's 'same_kind' rule); its "
                      f"spec expects shape {tuple(expected_shape)} and dtype {expected_dtype}")


def time_step_count_error(env_id: Any, got: int, paths: Sequence[str]) -> ValueError:
    """The error for a time step with the wrong number of leaves."""
    return ValueError(f"env {env_id} returned a time step with {got} leaves, but its "
                      f"time_step_spec() has {len(paths)} ({', '.join(paths)}); make "
                      f"step()/reset() return what the specs describe")


class ActionChecker:
    """Checks actions against the per-env ``action_spec`` (and converts them, in the
    parent); ``batch_size`` is their leading dimension (``None``: unbatched)."""

    def __init__(self, action_spec: Any, batch_size: Optional[int]) -> None:
        self._spec = action_spec
        self._nested = nest.is_nested(action_spec)
        outer = () if batch_size is None else (int(batch_size),)
        self._leaves = [(nest.field_name("action", path), spec.numpy_dtype,
                         outer + tuple(spec.shape), tuple(spec.shape))
                        for path, spec in nest.flatten_with_path(action_spec)]
        self._batch_size = batch_size

    def flat(self, action: Any) -> List[np.ndarray]:
        """The flattened action as C-contiguous arrays of the spec dtypes; a ``ValueError``
        names the field and the expected shape and dtype."""
        if not self._nested and not nest.is_nested(action):  # one leaf (the common case)
            return [self._convert(action, *self._leaves[0])]
        leaves = self._flat_leaves(action)
        return [self._convert(leaf, *info) for leaf, info in zip(leaves, self._leaves)]

    def single_array(self, action: Any) -> Optional[np.ndarray]:
        """The unchecked array of a one-leaf action (a numpy array, a CPU tensor's view), else
        ``None``: for a caller that copies it if exactly right, else calls :meth:`flat`."""
        if self._nested:
            return None
        if type(action) is np.ndarray:
            return action
        return _tensor_view(action) if _is_tensor(action) else None

    def __call__(self, action: Any) -> Any:
        """Like :meth:`flat`, packed back into the action spec's structure."""
        return nest.pack_sequence_as(self._spec, self.flat(action))

    def check(self, action: Any, flattened: bool = False) -> None:
        """Checks ``action`` (its leaves if ``flattened``) as :meth:`flat`, without converting."""
        if flattened:
            if len(action) != len(self._leaves):
                raise ValueError(f"action: expected {len(self._leaves)} leaves "
                                 f"({', '.join(f for f, *_ in self._leaves)}), got {len(action)}")
            leaves = action
        else:
            leaves = self._flat_leaves(action)
        for leaf, (field, dtype, shape, spec_shape) in zip(leaves, self._leaves):
            weak = _WEAK_KINDS.get(type(leaf))
            if weak is not None:
                if shape != ():
                    self._raise_shape(field, dtype, shape, spec_shape, ())
                if dtype.kind not in weak:
                    self._raise_dtype(field, dtype, type(leaf).__name__)
                continue
            got_shape, got_dtype = _shape_and_dtype(leaf)
            self._check_leaf(field, dtype, shape, spec_shape, got_shape, got_dtype)

    def _flat_leaves(self, action: Any) -> List[Any]:
        if self._nested or nest.is_nested(action):
            try:
                nest.assert_same_structure(action, self._spec)
            except (TypeError, ValueError) as err:
                raise ValueError(f"action: its nest structure does not match the "
                                 f"action spec {self._spec!r}: {err}") from None
            return nest.flatten(action)
        return [action]

    def _convert(self, leaf: Any, field: str, dtype: np.dtype, shape: Shape,
                 spec_shape: Shape) -> np.ndarray:
        if _is_tensor(leaf):
            view = _tensor_view(leaf)
            leaf = view if view is not None else leaf.detach().cpu().numpy()
        array = leaf if type(leaf) is np.ndarray else np.asarray(leaf)
        if array.dtype == dtype and array.shape == shape and array.flags.c_contiguous:
            return array  # what the check and ascontiguousarray below give
        self._check_leaf(field, dtype, shape, spec_shape, array.shape, array.dtype)
        return np.ascontiguousarray(array, dtype=dtype)

    def _check_leaf(self, field: str, dtype: np.dtype, shape: Shape, spec_shape: Shape,
                    got_shape: Shape, got_dtype: np.dtype) -> None:
        if got_shape != shape and tuple(got_shape) != shape:
            self._raise_shape(field, dtype, shape, spec_shape, tuple(got_shape))
        if got_dtype != dtype and not can_cast(got_dtype, dtype, "safe"):
            self._raise_dtype(field, dtype, got_dtype)

    def _raise_shape(self, field: str, dtype: np.dtype, shape: Shape, spec_shape: Shape,
                     got: Shape) -> None:
        batch = ("" if self._batch_size is None else
                 f" (batch size {self._batch_size} x spec shape {spec_shape})")
        raise ValueError(f"{field}: expected shape {shape}{batch} and dtype {dtype}, "
                         f"got shape {got}")

    @staticmethod
    def _raise_dtype(field: str, dtype: np.dtype, got: Any) -> None:
        raise ValueError(f"{field}: expected dtype {dtype} (or one that casts to it safely), "
                         f"got {got}; convert it explicitly, e.g. .astype({dtype.name!r})")


class TimeStepChecker:
    """Checks (and converts to the spec's dtypes) the time steps env ``env_id`` returns."""

    def __init__(self, time_step_spec: Any, batch_size: Optional[int], env_id: Any) -> None:
        outer = () if batch_size is None else (int(batch_size),)
        self._env_id = env_id
        self._leaves = [(path, outer + tuple(spec.shape), spec.numpy_dtype, spec.dtype)
                        for path, spec in nest.flatten_with_path(time_step_spec)]
        self._paths = [path for path, *_ in self._leaves]

    def __call__(self, time_step: Any) -> Any:
        """``time_step``, its leaves converted to the spec dtypes if needed; a ``ValueError``
        names the field, the expected and the actual shape and dtype."""
        leaves = nest.flatten(time_step)
        checked = self._check(leaves)
        return time_step if checked is leaves else nest.pack_sequence_as(time_step, checked)

    def flat(self, time_step: Any) -> List[Any]:
        """Like calling the checker, but returns the checked leaves."""
        return self._check(nest.flatten(time_step))

    def _check(self, leaves: List[Any]) -> List[Any]:
        """``leaves``, or a copy if a dtype had to be converted."""
        if len(leaves) != len(self._leaves):
            raise time_step_count_error(self._env_id, len(leaves), self._paths)
        converted = leaves
        for i, (leaf, (path, shape, dtype, torch_dtype)) in enumerate(zip(leaves, self._leaves)):
            got_shape, got_dtype = _shape_and_dtype(leaf)
            if got_shape != shape and tuple(got_shape) != shape:
                raise time_step_leaf_error(self._env_id, path, got_shape, got_dtype, shape, dtype)
            if got_dtype is dtype or got_dtype == dtype:
                continue
            if not can_cast(got_dtype, dtype, "same_kind"):
                raise time_step_leaf_error(self._env_id, path, got_shape, got_dtype, shape, dtype)
            if converted is leaves:
                converted = list(leaves)
            converted[i] = (leaf.to(torch_dtype) if type(leaf).__module__ == "torch"
                            else np.asarray(leaf).astype(dtype))
        return converted


class WorkerSpecGuard:
    """What a pipe-path worker checks around its ``AlfEnvironment``'s ``step``/``reset``."""

    def __init__(self, env: Any, env_id: Any) -> None:
        batch_size = int(env.batch_size) if env.batched else None
        self.action = ActionChecker(env.action_spec(), batch_size)
        self.time_step = TimeStepChecker(env.time_step_spec(), batch_size, env_id)

    @staticmethod
    def for_env(env: Any, env_id: Any) -> Optional["WorkerSpecGuard"]:
        """A guard if ``env`` is an ``AlfEnvironment``, else ``None``."""
        module = sys.modules.get(_ALF_ENVIRONMENT_MODULE)
        if module is None or not isinstance(env, module.AlfEnvironment):
            return None  # not imported: env cannot be one
        return WorkerSpecGuard(env, env_id)
