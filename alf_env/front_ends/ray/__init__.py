"""alf_env's batched environments with their workers on a Ray cluster.

``RayVectorEnv`` (a ``gymnasium.vector.VectorEnv``) and
``RayParallelAlfEnvironment`` (the ``ParallelAlfEnvironment`` contract) split
their envs over Ray actors; each actor steps its share in a local
:class:`~alf_env.vector.FastVectorEnv` (or
:class:`~alf_env.environments.fast_parallel_environment.FastParallelEnvironment`),
so one Ray round trip carries a whole batch. See ``docs/distributed.rst``.

Ray is optional (``pip install alf_env[ray]``): this package imports it only
when an environment is built, so ``import alf_env.distributed`` works without it.
"""

from alf_env.lazy_import import lazy_exports

__all__ = ["RayVectorEnv", "RayParallelAlfEnvironment", "RestartPolicy", "ActorDiedError"]

_LAZY = {
    "RayVectorEnv": "alf_env.front_ends.ray.vector_env",
    "RayParallelAlfEnvironment": "alf_env.front_ends.ray.alf",
    "RestartPolicy": "alf_env.front_ends.ray.restart",
    "ActorDiedError": "alf_env.front_ends.ray.restart",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
