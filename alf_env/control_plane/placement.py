"""Choosing, while the env runs, between pinned workers and workers the OS places.

On a quiet machine, pinning the workers of a lockstep batch round robin to the
CPUs (``worker_cpus="auto"``) is 2-10% faster: the kernel's balancer cannot
leave two busy workers on one core. On a shared machine it can be many times
slower: a pinned worker whose core is held by something else (another
training, a busy process, the trainer's own OpenMP threads spinning after a
torch op) waits for that core's time slice to end instead of moving to the
other one. Which one wins depends on what else runs, and that changes while a
training runs, so :class:`PlacementTuner` measures both, with the steps the
trainer takes anyway:

1. it times a window of lockstep steps pinned, then a window with the OS
   placing the workers, and keeps the placement whose mean step was shorter
   (the OS's only when it wins by more than ``margin``, since pinning is the
   one that wins on a quiet machine);
2. it keeps that placement for ``period_s`` seconds of stepping, then times
   a window of the current placement and one of the other, back to back,
   and chooses again; so a load that comes or goes is noticed within about
   ``period_s``.

The windows at the losing placement cost a few percent of one window in
every period. Each decision is kept in :attr:`PlacementTuner.decisions` and
logged at INFO when the placement changes.
"""

import enum
import os
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from absl import logging

from alf_env.control_plane.affinity import AUTO, normal_scheduling

#: Lockstep steps per timed window.
WINDOW_STEPS = 128
#: Seconds of stepping between two re-evaluations.
PERIOD_S = 10.0
#: How much shorter the OS placement's mean step must be to be chosen: more than
#: the noise of one window on a quiet machine, far less than what a busy core costs
#: a pinned worker (2-10x).
MARGIN = 0.2


class Placement(enum.Enum):
    """Where the workers run."""
    PINNED = "pinned"  # worker i on CPU plan[i]
    OS = "os"  # on any CPU this process may use


class Decision(NamedTuple):
    """One choice between the placements.

    Attributes:
        pinned_s: mean seconds per step pinned, in its window.
        os_s: mean seconds per step placed by the OS, in its window.
        chosen: the placement kept.
    """
    pinned_s: float
    os_s: float
    chosen: Placement


class _Phase(enum.Enum):
    TIME_PINNED = "time_pinned"
    TIME_OS = "time_os"
    SETTLED = "settled"


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


class PlacementTuner:
    """Times lockstep steps under each placement and keeps the faster (module doc).

    Args:
        pids: the worker processes.
        plan: the CPU of each worker when pinned (they start pinned).
        window: steps per timed window.
        period_s: seconds of stepping between re-evaluations.
        margin: how much faster (a fraction) the OS placement must be.
        apply: ``apply(placement)`` moves the workers (default:
            :func:`place_workers` on ``pids`` and ``plan``).
        clock: the clock that measures ``period_s``.
    """

    def __init__(self, pids: Sequence[int], plan: Sequence[int], window: int = WINDOW_STEPS,
                 period_s: float = PERIOD_S, margin: float = MARGIN,
                 apply: Optional[Callable[[Placement], None]] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.period_s = period_s
        self.margin = margin
        self._apply = apply or (lambda p: place_workers(list(pids), list(plan), p))
        self._clock = clock
        self.placement = Placement.PINNED
        self.decisions: List[Decision] = []
        self._phase = _Phase.TIME_PINNED
        self._first = Placement.PINNED  # which placement the current pair timed first
        self._count = 0
        self._total = 0.0
        self._means: Dict[Placement, float] = {}
        self._settled_until = 0.0

    def _switch(self, placement: Placement) -> None:
        if placement is not self.placement:
            self._apply(placement)
            self.placement = placement

    def observe(self, seconds: float) -> None:
        """Counts one lockstep step that took ``seconds`` (post to last completion)."""
        if self._phase is _Phase.SETTLED:
            if self._clock() < self._settled_until:
                return
            # Time the current placement first, then the other one.
            self._first = self.placement
            self._phase = (_Phase.TIME_PINNED if self.placement is Placement.PINNED
                           else _Phase.TIME_OS)
            self._count, self._total = 0, 0.0
            return
        self._count += 1
        self._total += seconds
        if self._count < self.window:
            return
        timed = Placement.PINNED if self._phase is _Phase.TIME_PINNED else Placement.OS
        self._means[timed] = self._total / self._count
        self._count, self._total = 0, 0.0
        other = Placement.OS if timed is Placement.PINNED else Placement.PINNED
        if other not in self._means or timed is self._first:
            self._means.pop(other, None)
            self._switch(other)
            self._phase = _Phase.TIME_OS if other is Placement.OS else _Phase.TIME_PINNED
            return
        self._decide()

    def _decide(self) -> None:
        pinned, by_os = self._means[Placement.PINNED], self._means[Placement.OS]
        chosen = Placement.OS if by_os < pinned * (1.0 - self.margin) else Placement.PINNED
        self.decisions.append(Decision(pinned, by_os, chosen))
        if chosen is not self.placement:
            logging.info("alf_env: %s workers step faster here (%.0f us per step, against "
                         "%.0f us %s); moving them", "OS-placed" if chosen is Placement.OS
                         else "pinned", min(pinned, by_os) * 1e6, max(pinned, by_os) * 1e6,
                         "pinned" if chosen is Placement.OS else "OS-placed")
        self._switch(chosen)
        self._means.clear()
        self._phase = _Phase.SETTLED
        self._settled_until = self._clock() + self.period_s


def adapt_placement(pids: Sequence[int], worker_cpus: object,
                    plan: Optional[Sequence[int]]) -> Optional[Callable[[float], None]]:
    """Readies the workers of a shared-memory front end for a shared machine.

    Puts them under the normal scheduling policy, and when ``worker_cpus`` is
    ``"auto"`` and pinned them (``plan``), returns the step timer of a
    :class:`PlacementTuner` that keeps them pinned only while that is faster.
    A placement the user asked for (``"spread"``, a list of CPUs, ``None``) is
    kept as it is.
    """
    normal_scheduling(pids)
    if worker_cpus != AUTO or plan is None:
        return None
    return PlacementTuner(pids, plan).observe
