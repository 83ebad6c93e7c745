"""gymnasium spaces as spec nests, as ALF makes them: :func:`tensor_spec_from_gym_space`.

=================  ==========================================================
gymnasium space    spec
=================  ==========================================================
``Box``            ``BoundedTensorSpec(shape, dtype, low, high)``, a floating
                   dtype replaced by ``float_dtype`` (float32, as in ALF)
``Discrete``       ``BoundedTensorSpec((), int64, start, start + n - 1)``
``MultiDiscrete``  ``BoundedTensorSpec(nvec.shape, dtype, start, start + nvec - 1)``
``MultiBinary``    ``BoundedTensorSpec(shape, int8, 0, 1)``
``Dict``           ``dict`` of the sub-specs, in the space's key order
``Tuple``          ``tuple`` of the sub-specs
=================  ==========================================================
"""

from typing import Any, Optional

import numpy as np
from gymnasium import spaces

from alf_env.nest import join_path
from alf_env.tensor_specs import BoundedTensorSpec, numpy_dtype_to_torch

__all__ = ["tensor_spec_from_gym_space"]


def _simplified(bound: np.ndarray, simplify: bool) -> np.ndarray:
    if simplify and bound.size > 0 and np.all(bound == bound.flat[0]):
        return np.array(bound.flat[0], dtype=bound.dtype)
    return bound


def tensor_spec_from_gym_space(space: spaces.Space[Any], simplify_box_bounds: bool = True,
                               float_dtype: Optional[Any] = np.float32, *, path: str = "") -> Any:
    """Converts a gymnasium space to a nest of ``BoundedTensorSpec``.

    Args:
        space: a space of the module docstring's table (nested freely).
        simplify_box_bounds: keep a ``Box`` / ``MultiDiscrete`` bound whose elements are
            all equal as a 0-d array (``spec.minimum.shape == ()``).
        float_dtype: the dtype of the specs of floating ``Box`` spaces; ``None`` keeps
            the space's dtype.
        path: where ``space`` sits, for error messages.

    Raises:
        TypeError: for any other kind of space, naming its path.
    """
    if isinstance(space, spaces.Box):
        dtype = space.dtype
        if float_dtype is not None and np.issubdtype(dtype, np.floating):
            dtype = np.dtype(float_dtype)
        with np.errstate(over="ignore"):  # float64 extremes become +-inf
            low = np.asarray(space.low, dtype=dtype)
            high = np.asarray(space.high, dtype=dtype)
        return BoundedTensorSpec(space.shape, dtype, _simplified(low, simplify_box_bounds),
                                 _simplified(high, simplify_box_bounds))
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return BoundedTensorSpec((), numpy_dtype_to_torch(space.dtype), start,
                                 start + int(space.n) - 1)
    if isinstance(space, spaces.MultiDiscrete):
        low = np.asarray(space.start, dtype=space.dtype)
        high = (low + np.asarray(space.nvec) - 1).astype(space.dtype)
        return BoundedTensorSpec(space.nvec.shape, space.dtype,
                                 _simplified(low, simplify_box_bounds),
                                 _simplified(high, simplify_box_bounds))
    if isinstance(space, spaces.MultiBinary):
        return BoundedTensorSpec(space.shape, space.dtype, 0, 1)
    if isinstance(space, spaces.Dict):
        return {k: tensor_spec_from_gym_space(s, simplify_box_bounds, float_dtype,
                                              path=join_path(path, k))
                for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(tensor_spec_from_gym_space(s, simplify_box_bounds, float_dtype,
                                                path=join_path(path, i))
                     for i, s in enumerate(space.spaces))
    raise TypeError(f"space at {path or '<root>'}: expected Box, Discrete, MultiDiscrete, "
                    f"MultiBinary, Dict or Tuple, got {type(space).__name__} ({space})")
