"""The Ray front ends, RayVectorEnv and RayParallelAlfEnvironment (docs/distributed.rst);
Ray itself is imported only when an environment is built."""

from alf_env.lazy_import import lazy_exports

__all__ = ["RayVectorEnv", "RayParallelAlfEnvironment", "RestartPolicy", "ActorDiedError"]

_LAZY = {
    "RayVectorEnv": "alf_env.front_ends.ray.vector_env",
    "RayParallelAlfEnvironment": "alf_env.front_ends.ray.alf",
    "RestartPolicy": "alf_env.front_ends.ray.restart",
    "ActorDiedError": "alf_env.front_ends.ray.restart",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
