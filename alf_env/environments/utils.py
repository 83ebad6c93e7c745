"""Re-export (public import path): create_environment lives in :mod:`alf_env.front_ends.alf`."""

from alf_env.front_ends.alf.create import create_environment

__all__ = ['create_environment']
