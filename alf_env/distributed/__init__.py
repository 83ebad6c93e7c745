"""Re-export (public import path): the Ray front ends live in :mod:`alf_env.front_ends.ray`."""

from alf_env.front_ends.ray import __all__, __dir__, __getattr__  # noqa: F401
