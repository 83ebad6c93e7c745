"""Freeing the cores that the trainer's OpenMP threads spin on after a torch op.

After each parallel region, the threads of libgomp's pool (torch's CPU
kernels run on them) spin for a few milliseconds before they sleep, in case
another region follows. In a training loop the batched env step follows the
policy's forward pass, so those spinning threads hold the cores that the
workers need for the step.

:class:`OpenMpPark` parks the pool for the step: the native ``_OpenMpPark``
opens a parallel region whose other threads sleep on a futex until the step
ends (csrc/openmp_park.h). The threads survive, so the next forward pass does
not pay for creating them (``omp_pause_resource_all`` would release them,
and recreating them cost 40-75 µs a step). Closing the region waits for the
woken threads, so whether parking pays is measured while the env runs
(:class:`~alf_env.control_plane.step_tuner.StepTuner`); docs/benchmarks.md,
"What decides these figures", has the figures.
"""

import os
from typing import Callable, Optional

from absl import logging

from alf_env import _penv

#: Names of the OpenMP runtimes that torch (and numpy's BLAS) load.
RUNTIMES = ("libgomp", "libiomp", "libomp")


def loaded_openmp_runtime(maps_path: str = "/proc/self/maps") -> Optional[str]:
    """The path of an OpenMP runtime this process has loaded, or ``None``."""
    try:
        with open(maps_path) as maps:
            for line in maps:
                path = line.rsplit(maxsplit=1)[-1] if "/" in line else ""
                if os.path.basename(path).startswith(RUNTIMES):
                    return path
    except OSError:
        return None
    return None


class OpenMpPark:
    """Parks the stepping thread's OpenMP pool during each step, when enabled.

    The runtime is looked up (without loading anything) the first time
    :attr:`available` is read after torch has loaded it.
    """

    def __init__(self) -> None:
        self.enabled = False
        self._park: Optional[_penv._OpenMpPark] = None
        self._looked_up_path: Optional[str] = None

    @property
    def available(self) -> bool:
        """Whether the process has loaded an OpenMP runtime that can be parked."""
        if self._park is not None:
            return True
        path = loaded_openmp_runtime()
        if path is None or path == self._looked_up_path:
            return False
        self._looked_up_path = path
        try:
            self._park = _penv._OpenMpPark(path)
        except RuntimeError as exc:
            logging.info("alf_env: cannot park the OpenMP pool: %s", exc)
            return False
        return True

    @property
    def parked(self) -> bool:
        """Whether the pool is parked now (between a step's start and its end)."""
        return self._park is not None and self._park.parked

    def set(self, enabled: object) -> None:
        """Switches parking on or off (the apply of the tuner's ``openmp_park`` knob)."""
        self.enabled = bool(enabled)

    def begin(self) -> Optional[Callable[[], None]]:
        """Parks the pool if enabled; returns what unparks it at the step's end."""
        if self.enabled and self._park is not None:
            self._park.begin()
            return self._park.end
        return None
