"""Re-export (public import path): FastVectorEnv lives in :mod:`alf_env.front_ends.gym`."""

from alf_env.front_ends.gym.make import make
from alf_env.front_ends.gym.results import ENV_ID_DTYPE
from alf_env.front_ends.gym.startup import plan_workers
from alf_env.front_ends.gym.state import AsyncState, Seeds
from alf_env.front_ends.gym.vector_env import FastVectorEnv

__all__ = ['ENV_ID_DTYPE', 'Seeds', 'AsyncState', 'FastVectorEnv', 'plan_workers', 'make']
