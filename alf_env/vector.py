"""Re-export (public import path): FastVectorEnv lives in :mod:`alf_env.front_ends.gym`."""

from alf_env.front_ends.gym.vector_env import (  # noqa: F401
    ENV_ID_DTYPE, Seeds, AsyncState, FastVectorEnv, plan_workers, make,)

__all__ = ['ENV_ID_DTYPE', 'Seeds', 'AsyncState', 'FastVectorEnv', 'plan_workers', 'make']
