"""The settings a :class:`~alf_env.data_plane.job_board.JobBoard` tunes while it steps.

Each is a :class:`~alf_env.control_plane.step_tuner.Knob` of one
:class:`~alf_env.control_plane.step_tuner.StepTuner`; docs/benchmarks.md,
"What decides these figures", lists them. The long job-wait spin is 300 µs,
not the spin mode's own cap (2-5 ms): beside a busy process, workers spinning
that long looked faster for a window, then ran at a fifth of the speed once
the kernel's balancer moved them.
"""

from typing import Any, Optional, Sequence

from alf_env import _penv
from alf_env.control_plane.affinity import is_auto, normal_scheduling
from alf_env.control_plane.openmp import OpenMpPause
from alf_env.control_plane.placement import MARGIN as PLACEMENT_MARGIN
from alf_env.control_plane.placement import Placement, place_workers
from alf_env.control_plane.step_tuner import Knob, StepTuner
from alf_env.data_plane.job_board import JobBoard

#: The worker's job-wait spin cap (µs) preferred in a training loop.
SHORT_JOB_WAIT_SPIN_US = 50
#: The worker's job-wait spin cap (µs) where the trainer's gap between steps is short.
LONG_JOB_WAIT_SPIN_US = 300
#: How much shorter the cycle must be to switch the spin or the OpenMP pause:
#: either choice costs little when it is wrong, so a small margin, above the
#: noise of four windows on a quiet machine.
SPIN_MARGIN = 0.05
PAUSE_MARGIN = 0.05
#: Seconds per window when timing the OpenMP pause: a kept pool costs rare
#: cycles of 5-20 ms, which windows of 64 cycles often miss, and then keeping
#: it looked faster.
PAUSE_WINDOW_S = 0.5
#: The ``spin_us`` of the adaptive spin (the only one whose cap is tuned).
ADAPTIVE_SPIN = -1


def tune_board(board: JobBoard, pids: Sequence[int], worker_cpus: Any,
               plan: Optional[Sequence[int]], spin_us: int) -> StepTuner:
    """Readies the workers for a shared machine and tunes the board while it steps.

    Installs :func:`controller_tuner`'s tuner as the board's step hook.
    """
    tuner = controller_tuner(board.controller, pids, worker_cpus, plan, spin_us)
    board.step_hook = tuner.step_started
    return tuner


def controller_tuner(controller: _penv.Controller, pids: Sequence[int], worker_cpus: Any,
                     plan: Optional[Sequence[int]], spin_us: int) -> StepTuner:
    """The tuner of the settings of ``controller``'s workers (``pids``), to be called
    at every step's start.

    Puts the workers under the normal scheduling policy. Settings the user chose
    (``worker_cpus`` other than ``"auto"``, a fixed ``spin_us``) are kept.
    """
    pids = list(pids)
    normal_scheduling(pids)
    # Released unless keeping the pool measures faster: a release can leave
    # the loop in a slow state (new OpenMP threads on the trainer's own core),
    # which its first windows show when it is the starting value, and which
    # a release tried later from a kept pool fell into after winning its
    # windows. Timed first: switching it ends the state (step_tuner.DRIFT).
    # docs/benchmarks.md, "What decides these figures", has the runs.
    pause = OpenMpPause()
    pause.set(True)
    knobs = [Knob("openmp_pause", True, False, pause.set, PAUSE_MARGIN,
                  available=lambda: pause.available, window_s=PAUSE_WINDOW_S)]
    if is_auto(worker_cpus) and plan is not None:
        cpus = list(plan)

        def place(placement: Any) -> None:
            place_workers(pids, cpus, Placement(placement))

        knobs.append(Knob("placement", Placement.OS, Placement.PINNED, place,
                          PLACEMENT_MARGIN))
    if spin_us == ADAPTIVE_SPIN:
        controller.job_wait_spin_us = SHORT_JOB_WAIT_SPIN_US

        def set_cap(cap_us: Any) -> None:
            controller.job_wait_spin_us = cap_us

        knobs.append(Knob("job_wait_spin_us", SHORT_JOB_WAIT_SPIN_US, LONG_JOB_WAIT_SPIN_US,
                          set_cap, SPIN_MARGIN))
    return StepTuner(knobs, before_step=[pause])
