"""Re-export (public import path): ParallelAlfEnvironment lives in :mod:`alf_env.front_ends.alf`."""

from alf_env.environments.members_specs import check_same_specs
from alf_env.front_ends.alf.parallel_environment import ParallelAlfEnvironment, SlotScheduler

__all__ = ['check_same_specs', 'SlotScheduler', 'ParallelAlfEnvironment']
