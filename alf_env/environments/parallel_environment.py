"""Re-export (public import path): ParallelAlfEnvironment lives in :mod:`alf_env.front_ends.alf`."""

from alf_env.front_ends.alf.parallel_environment import (
    ParallelAlfEnvironment,
    SlotScheduler,
    check_same_specs,
)

__all__ = ['check_same_specs', 'SlotScheduler', 'ParallelAlfEnvironment']
