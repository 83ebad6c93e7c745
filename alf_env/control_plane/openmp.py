"""Freeing the cores that the trainer's OpenMP threads spin on after a torch op.

After each parallel region, the threads of libgomp's pool (torch's CPU
kernels run on them) spin for a few milliseconds before they sleep, in case
another region follows. In a training loop the batched env step follows the
policy's forward pass, so those spinning threads hold the cores that the
workers need for the step: on 2 CPUs, HalfCheetah-v5 with 8 envs ran at
10.1k env-steps/s with them spinning and 12.1k with the pool released before
each step (docs/benchmarks.md, "On a shared machine").

``omp_pause_resource_all`` (OpenMP 5.0) releases the calling thread's pool
from inside the library, whatever ``OMP_WAIT_POLICY`` was at import. Its cost
is the next parallel region's thread start (40-75 µs on that machine), so
whether it pays is measured while the env runs
(:class:`~alf_env.control_plane.step_tuner.StepTuner`).
"""

import ctypes
import os
from typing import Any, Optional

#: ``omp_pause_soft``: release the threads, keep what can be kept.
OMP_PAUSE_SOFT = 1
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


class OpenMpPause:
    """Releases the calling thread's OpenMP pool before a step, when enabled.

    The runtime is looked up (without loading anything) the first time
    :attr:`available` is read after torch has loaded it.
    """

    def __init__(self) -> None:
        self.enabled = False
        self._pause: Optional[Any] = None  # a ctypes function
        self._looked_up_path: Optional[str] = None

    @property
    def available(self) -> bool:
        """Whether the process has an OpenMP runtime with ``omp_pause_resource_all``."""
        if self._pause is not None:
            return True
        path = loaded_openmp_runtime()
        if path is None or path == self._looked_up_path:
            return False
        self._looked_up_path = path
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            pause = library.omp_pause_resource_all
        except (OSError, AttributeError):
            return False
        pause.argtypes = [ctypes.c_int]
        pause.restype = ctypes.c_int
        self._pause = pause
        return True

    def set(self, enabled: object) -> None:
        """Switches the pause on or off (a :class:`~.step_tuner.Knob`'s apply)."""
        self.enabled = bool(enabled)

    def __call__(self) -> None:
        if self.enabled and self._pause is not None:
            # Returns nonzero inside a parallel region (the pool is in use):
            # nothing to release then.
            self._pause(OMP_PAUSE_SOFT)
