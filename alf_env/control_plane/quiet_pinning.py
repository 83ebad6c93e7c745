"""Lockstep workers pinned one per CPU while no other process uses the CPUs (docs/options.rst,
``worker_cpus``): chosen from what the machine shows, and a wrong choice lasts a second."""

import os
import time
from typing import Callable, List, Optional, Sequence

LOOK_PERIOD_S = 1.0
#: Early: every step until the first look runs with the OS's placement.
FIRST_LOOK_S = 0.25
#: Other processes' CPU time (in CPUs) allowed while pinned; a quiet machine's is under 0.01.
OTHERS_MAX_CPUS = 0.25

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def machine_busy_s(stat_path: str = "/proc/stat") -> Optional[float]:
    """CPU seconds the machine's CPUs spent busy since boot (``None``: no ``/proc/stat``)."""
    try:
        with open(stat_path) as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest and guest_nice (fields 8, 9) are already counted in user and nice.
    return (sum(fields[:8]) - idle) * _TICK_S


def process_cpu_s(pid: int) -> Optional[float]:
    """CPU seconds process ``pid`` has used, or ``None`` if it has ended."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime


class QuietPinning:
    """Pins lockstep workers (``worker_pids()``: their current pids, ``None`` if not
    running) to CPU ``plan[i]`` while the machine is otherwise idle, else to ``cpus``;
    ``busy`` and ``cpu_of`` default to :func:`machine_busy_s` and :func:`process_cpu_s`."""

    def __init__(self, worker_pids: Callable[[], Sequence[Optional[int]]], plan: Sequence[int],
                 cpus: Sequence[int], clock: Callable[[], float] = time.monotonic,
                 busy: Optional[Callable[[], Optional[float]]] = None,
                 cpu_of: Optional[Callable[[int], Optional[float]]] = None) -> None:
        self._worker_pids = worker_pids
        self._plan = list(plan)
        self._cpus = set(cpus)
        self._clock = clock
        self._busy = busy if busy is not None else machine_busy_s
        self._cpu_of = cpu_of if cpu_of is not None else process_cpu_s
        self._due = clock() + FIRST_LOOK_S
        self._last: Optional[List[float]] = None  # [time, machine busy, ours] at the last look
        self.pinned = False
        self._sample(clock())  # what the machine did from here to the first look

    def look(self) -> None:
        """Pins or unpins the workers from what the machine did since the last look, if due."""
        now = self._clock()
        if now < self._due:
            return
        self._due = now + LOOK_PERIOD_S
        last = self._last
        pids = self._sample(now)
        if last is None or self._last is None:
            return
        sample = self._last
        others = ((sample[1] - last[1]) - (sample[2] - last[2])) / (sample[0] - last[0])
        pin = others < OTHERS_MAX_CPUS
        for pid, cpu in zip(pids, self._plan):
            try:
                os.sched_setaffinity(pid, {cpu} if pin else self._cpus)
            except OSError:  # ended: its restart is placed at the next look
                pass
        self.pinned = pin

    def _sample(self, now: float) -> List[int]:
        """Records the machine's and our processes' CPU time (``None`` while a worker
        is not running: the looks start over); returns the workers' pids."""
        pids = [pid for pid in self._worker_pids() if pid is not None]
        busy = self._busy()
        ours = [self._cpu_of(pid) for pid in [os.getpid(), *pids]]
        if busy is None or None in ours or len(pids) != len(self._plan):
            self._last = None
        else:
            self._last = [now, busy, sum(x for x in ours if x is not None)]
        return pids
