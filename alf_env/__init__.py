"""alf_env: fast, reliable multi-process RL environments.

The main names are re-exported here (``from alf_env import FastVectorEnv``);
the public contract is ``docs/contract.rst``.

Every name but the errors is loaded on first use: importing ``alf_env``
imports neither gymnasium, stable-baselines3, Ray nor torch, so that a worker
process that never touches torch (e.g. one of ``FastVectorEnv``'s, started
with ``spawn``) does not import it: that import is ~1 s of each such worker's
start-up.
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
    "GymProxy": "alf_env.front_ends.gym.proxy",
    "FastVectorEnv": "alf_env.front_ends.gym.vector_env",
    "FastSubprocVecEnv": "alf_env.front_ends.sb3.vec_env",
    "FastParallelEnvironment": "alf_env.front_ends.alf.fast_parallel_environment",
    "ParallelAlfEnvironment": "alf_env.front_ends.alf.parallel_environment",
    "ProcessEnvironment": "alf_env.control_plane.process_environment",
    "RestartPolicy": "alf_env.control_plane.restart",
    "StepTimings": "alf_env.control_plane.step_timings",
}

__all__ = [
    "__version__", "nest", "StepType", "TimeStep", "time_step_spec", "TensorSpec",
    "BoundedTensorSpec", "EnvironmentProcessError", "WorkerDiedError",
    "EnvironmentClosedError", "EnvTimeoutError", "GymProxy", "FastVectorEnv",
    "FastSubprocVecEnv", "FastParallelEnvironment", "ParallelAlfEnvironment",
    "ProcessEnvironment", "RestartPolicy", "StepTimings",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
