"""alf_env: fast, reliable multi-process RL environments.

The main names are re-exported here; the public contract is ``docs/contract.rst``.
The batched environments live in :mod:`alf_env.environments`.

The names that need torch (``TimeStep``, the specs) are loaded on first use,
so that a worker process that never touches torch (e.g. one of
``FastVectorEnv``'s, started with ``spawn``) does not import it: that import
is ~1 s of each such worker's start-up.
"""

__version__ = "0.1.0"

from alf_env import nest
from alf_env.errors import (
    EnvironmentClosedError,
    EnvironmentProcessError,
    EnvTimeoutError,
    WorkerDiedError,
)
from alf_env.lazy_import import lazy_exports

# Re-exported names -> the module that defines them (imported on first use).
_LAZY = {
    "StepType": "alf_env.data_structures",
    "TimeStep": "alf_env.data_structures",
    "time_step_spec": "alf_env.data_structures",
    "TensorSpec": "alf_env.tensor_specs",
    "BoundedTensorSpec": "alf_env.tensor_specs",
}

__all__ = [
    "__version__", "nest", "StepType", "TimeStep", "time_step_spec", "TensorSpec",
    "BoundedTensorSpec", "EnvironmentProcessError", "WorkerDiedError",
    "EnvironmentClosedError", "EnvTimeoutError",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
