"""Re-export (public import path): FastSubprocVecEnv lives in :mod:`alf_env.front_ends.sb3`."""

from alf_env.front_ends.sb3.vec_env import FastSubprocVecEnv

__all__ = ['FastSubprocVecEnv']
