"""Where the workers of a shared-memory front end run: pinned, or placed by the OS.

On a quiet machine, pinning the workers of a lockstep batch round robin to the
CPUs (``worker_cpus="auto"``) can be a few percent faster: the kernel's
balancer cannot leave two busy workers on one core (docs/benchmarks.md gives
what was measured). On a shared machine it can be many times slower: a
pinned worker whose core is held by something else (another training, a busy
process, the trainer's own OpenMP threads spinning after a
torch op) waits for that core's time slice to end instead of moving to the
other one. So the placement is a knob of the
:class:`~alf_env.control_plane.step_tuner.StepTuner`, which keeps the pinning
only while it is faster.
"""

import enum
import os
from typing import Sequence

#: How much shorter the trainer's cycle must be with the OS placing the workers
#: for that to be chosen: more than the noise of a window on a quiet machine,
#: far less than what a busy core costs a pinned worker (2-10x).
MARGIN = 0.2


class Placement(enum.Enum):
    """Where the workers run."""
    PINNED = "pinned"  # worker i on CPU plan[i]
    OS = "os"  # on any CPU this process may use


def place_workers(pids: Sequence[int], plan: Sequence[int], placement: Placement) -> None:
    """Pins ``pids[i]`` to ``plan[i]``, or lets them run on every usable CPU.

    A worker that has exited is skipped: its death is reported by whoever
    waits for it, not here.
    """
    allowed = os.sched_getaffinity(0)
    for pid, cpu in zip(pids, plan):
        try:
            os.sched_setaffinity(pid, {cpu} if placement is Placement.PINNED else allowed)
        except ProcessLookupError:
            continue
