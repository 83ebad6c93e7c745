"""Re-export (public import path): FastParallelEnvironment lives in
:mod:`alf_env.front_ends.alf`."""

from alf_env.front_ends.alf.fast_parallel_environment import (
    FastParallelEnvironment,
    plan_group_size,
)

__all__ = ['FastParallelEnvironment', 'plan_group_size']
