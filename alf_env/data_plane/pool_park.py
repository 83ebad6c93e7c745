"""Parking the trainer's torch threads, which spin for milliseconds after an op on the cores
the workers need, while a lockstep step runs (docs/benchmarks.md, "The trainer's torch threads")."""

import os
import sys
import time
from typing import Callable, List, Optional, Sequence

from absl import logging

from alf_env import _penv
from alf_env.control_plane.torch_threads import warn_pool_waiting

#: The OpenMP runtime whose pool can be parked (torch's CPU wheels load libgomp).
RUNTIME = "libgomp"
#: Trainer's seconds between steps past which it may have run a torch op (100 µs and more).
MIN_GAP_S = 50e-6
WATCH_PERIOD_S = 1.0
#: Share of a second past which the pool lacks CPUs (6-12% quiet; 48% beside a busy process).
WAITING_SHARE = 0.25


def run_delay_ns(tid: int) -> Optional[int]:
    """Nanoseconds thread ``tid`` has waited for a CPU, or ``None`` if it has ended."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as stats:
            return int(stats.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


class PoolWaitWatch:
    """Tells, once a second, whether the parked pool's threads waited for a CPU (then they
    wait for each other at every op, and the loop slows down many times)."""

    def __init__(self, read_delay: Callable[[int], Optional[int]] = run_delay_ns) -> None:
        self._read_delay = read_delay
        self._due = -float("inf")
        self._at = 0.0
        self._waited_ns: Optional[int] = None
        self._parks = 0

    def due(self, now: float) -> bool:
        """Whether a :meth:`look` is due."""
        return now >= self._due

    def look(self, tids: Sequence[int], parked_steps: int, now: float) -> Optional[float]:
        """The share of the time since the last look that the threads ``tids`` waited for
        a CPU, if above :data:`WAITING_SHARE` and the pool was parked meanwhile."""
        self._due = now + WATCH_PERIOD_S
        delays: List[Optional[int]] = [self._read_delay(tid) for tid in tids]
        waited = sum(d for d in delays if d is not None) if tids and None not in delays else None
        share = None
        if waited is not None and self._waited_ns is not None and parked_steps > self._parks:
            share = (waited - self._waited_ns) * 1e-9 / ((now - self._at) * len(tids))
        self._at, self._waited_ns, self._parks = now, waited, parked_steps
        return share if share is not None and share > WAITING_SHARE else None


def loaded_openmp_runtime(maps_path: str = "/proc/self/maps") -> Optional[str]:
    """The path of the libgomp this process has loaded, or ``None``."""
    try:
        with open(maps_path) as maps:
            for line in maps:
                path = line.rsplit(maxsplit=1)[-1] if "/" in line else ""
                if os.path.basename(path).startswith(RUNTIME):
                    return path
    except OSError:
        return None
    return None


def other_threads_cpu() -> float:
    """CPU seconds of this process's threads but the calling one."""
    return (time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
            - time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID))


class PoolPark:
    """Parks the trainer's OpenMP pool (counting ``parked_steps``) for a lockstep step when the
    trainer's code since the previous step took over :data:`MIN_GAP_S` and the pool's threads
    ran meanwhile, so they spin now (back-to-back steps leave it asleep: parking would wake it).
    It reads the pool's CPU clocks only after a long gap before the previous step too, so
    a loop of steps alone makes no system call for it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 coarse_cpu: Callable[[], float] = other_threads_cpu,
                 watch: Optional[PoolWaitWatch] = None) -> None:
        self._park: Optional[_penv.OpenMpPark] = None
        self._unavailable = False  # torch's runtime looked up, and not parkable
        self._clock = clock
        self._coarse_cpu = coarse_cpu
        self._returned_at = -float("inf")
        # The pool's CPU at the last return; read (a system call per thread, ~0.5 µs
        # each) only while the steps come after long gaps, ``None`` otherwise.
        self._pool_cpu_at: Optional[float] = None
        self._long_gap = False  # whether the trainer's code before the last step took long
        self._watch = watch if watch is not None else PoolWaitWatch()
        self.parked_steps = 0

    def _may_park(self) -> bool:
        """Whether a pool may exist to park."""
        return not self._unavailable and (self._park is not None or "torch" in sys.modules)

    def _pool_cpu(self) -> float:
        """CPU seconds of the pool's threads."""
        if self._park is not None:
            ns = self._park.pool_cpu_ns()
            if ns >= 0:
                return ns * 1e-9
        return self._coarse_cpu()

    def returned(self) -> None:
        """Notes that the front end handed a step's results to the trainer's code."""
        now = self._returned_at = self._clock()
        if self._may_park():
            # A loop of steps alone reads no CPU clock; the first long gap after them
            # (a forward pass) parks nothing, and teaches the next return to read it.
            self._pool_cpu_at = self._pool_cpu() if self._long_gap else None
            if self._park is not None and self._watch.due(now):
                tids = self._park.pool_tids()
                share = self._watch.look(tids, self.parked_steps, now)
                if share is not None:
                    warn_pool_waiting(len(tids) + 1, share)

    def before_step(self) -> bool:
        """Parks the pool if a torch op ran since the last step; returns whether it did."""
        long_gap = self._long_gap = self._clock() - self._returned_at > MIN_GAP_S
        pool_cpu_at = self._pool_cpu_at
        if (not long_gap or pool_cpu_at is None or not self._may_park()
                or self._pool_cpu() <= pool_cpu_at):
            return False
        park = self._park
        if park is None:
            path = loaded_openmp_runtime()
            try:
                if path is None:
                    raise RuntimeError("torch loaded no libgomp")
                park = self._park = _penv.OpenMpPark(path)
            except RuntimeError as err:  # e.g. a runtime without the entry points
                self._unavailable = True
                logging.info("alf_env: not parking torch's OpenMP threads: %s", err)
                return False
        parked = park.park()
        self.parked_steps += parked
        return parked

    def after_step(self, parked: bool) -> None:
        """Wakes the threads :meth:`before_step` parked."""
        if parked and self._park is not None:
            self._park.release()
