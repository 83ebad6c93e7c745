"""Re-export (public import path): ParallelAlfEnvironment lives in :mod:`alf_env.front_ends.alf`."""

from alf_env.front_ends.alf.parallel_environment import (  # noqa: F401
    check_same_specs, SlotScheduler, ParallelAlfEnvironment,)

__all__ = ['check_same_specs', 'SlotScheduler', 'ParallelAlfEnvironment']
