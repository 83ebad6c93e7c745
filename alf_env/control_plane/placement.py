"""Where the workers of a shared-memory front end run: pinned, or placed by the OS.

Pinning the workers of a lockstep batch round robin to the CPUs keeps the
kernel's balancer from leaving two busy workers on one core. Measured inside
one env it gained nothing on a quiet machine or with a policy in the loop,
and cost 16-24% beside a busy process (docs/benchmarks.md): a pinned worker
whose core is held by something else (another training, a busy process, the
trainer's own OpenMP threads spinning after a torch op) waits for that
core's time slice instead of moving to the other one. So the OS places the
workers, and the placement is a knob of the
:class:`~alf_env.control_plane.step_tuner.StepTuner`, which pins them only
while that is clearly faster.
"""

import enum
import os
from typing import Sequence

#: How much shorter the trainer's cycle must be with the workers pinned for
#: that to be chosen: more than the noise of a window on a loaded machine, so a
#: lucky window does not pin workers that a busy core then holds up.
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
