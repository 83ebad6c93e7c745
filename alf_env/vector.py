"""Re-export (public import path): FastVectorEnv lives in :mod:`alf_env.front_ends.gym`."""

from alf_env.front_ends.gym.engine import ENV_ID_DTYPE  # noqa: F401
from alf_env.front_ends.gym.startup import plan_workers  # noqa: F401
from alf_env.front_ends.gym.state import AsyncState, Seeds  # noqa: F401
from alf_env.front_ends.gym.make import make  # noqa: F401
from alf_env.front_ends.gym.vector_env import FastVectorEnv  # noqa: F401

__all__ = ['ENV_ID_DTYPE', 'Seeds', 'AsyncState', 'FastVectorEnv', 'plan_workers', 'make']
