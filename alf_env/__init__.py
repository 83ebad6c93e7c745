"""alf_env: fast, reliable multi-process RL environments (the contract: docs/contract.rst).

The main names are re-exported here, each but the errors loaded on first use: a worker
that never touches torch (e.g. one of ``FastVectorEnv``'s, spawned) does not pay ~1 s of
its start-up importing it.
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

__all__ = ["__version__", "nest", "StepType", "TimeStep", "time_step_spec", "TensorSpec",
           "BoundedTensorSpec", "EnvironmentProcessError", "WorkerDiedError",
           "EnvironmentClosedError", "EnvTimeoutError", "GymProxy", "FastVectorEnv",
           "FastSubprocVecEnv", "FastParallelEnvironment", "ParallelAlfEnvironment",
           "ProcessEnvironment", "RestartPolicy", "StepTimings"]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
