"""alf_env: fast, reliable multi-process RL environments.

The main names are re-exported here; the public contract is ``shared/API.md``.
The batched environments live in :mod:`alf_env.environments`.
"""

__version__ = "0.1.0"

from alf_env import nest
from alf_env.data_structures import StepType, TimeStep, time_step_spec
from alf_env.errors import (EnvironmentClosedError, EnvironmentProcessError,
                            EnvTimeoutError, WorkerDiedError)
from alf_env.tensor_specs import BoundedTensorSpec, TensorSpec

__all__ = [
    "__version__", "nest", "StepType", "TimeStep", "time_step_spec", "TensorSpec",
    "BoundedTensorSpec", "EnvironmentProcessError", "WorkerDiedError",
    "EnvironmentClosedError", "EnvTimeoutError",
]
