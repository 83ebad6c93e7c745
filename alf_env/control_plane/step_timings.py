"""Where each step's time goes: the figures of ``timings()`` on the local front ends (what
each means, how it is kept: docs/simulators.rst, "Where each step's time goes")."""

import dataclasses
import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

__all__ = ["NUM_BUCKETS", "BatchClock", "STEP_TIMINGS_CALL", "DurationStats", "StepClock",
           "StepTimings", "batch_figures", "bucket_bounds", "bucket_of", "buckets_of",
           "env_figures", "no_figure", "percentile"]

#: Buckets of a timing histogram (``_penv.TIMING_BUCKETS``): 8 per power of two of ns.
NUM_BUCKETS = 496

#: The reserved call name a worker answers with its :meth:`StepClock.take`.
STEP_TIMINGS_CALL = "<step_timings>"

#: A worker's reading: per env, ``(steps, sum of the timed steps' ns, {bucket: count})``.
ClockReading = List[Tuple[int, int, Dict[int, int]]]


def bucket_of(ns: int) -> int:
    """The histogram bucket of ``ns >= 0`` nanoseconds: each power of two split in 8, as
    the native ``timing_bucket`` does (so p50 and p99 are exact to within 12.5 %)."""
    bits = ns.bit_length()
    if bits < 4:
        return ns
    return ((bits - 3) << 3) | ((ns >> (bits - 4)) & 7)


def bucket_bounds(bucket: int) -> Tuple[int, int]:
    """``[low, high)`` in ns of the durations in ``bucket``."""
    if not 0 <= bucket < NUM_BUCKETS:
        raise ValueError(f"bucket: expected 0 <= bucket < {NUM_BUCKETS}, got {bucket}")
    if bucket < 8:
        return bucket, bucket + 1
    shift = (bucket >> 3) - 1
    sub = bucket & 7
    return (8 + sub) << shift, (9 + sub) << shift


def percentile(buckets: Dict[int, int], q: float) -> float:
    """The ``q``-th percentile (0-100) in ns of the durations counted in ``buckets``
    (``nan`` when empty), at numpy's default rank, a bucket's samples spread evenly over it."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile: expected q in [0, 100], got {q}")
    total = sum(buckets.values())
    if total == 0:
        return float("nan")
    rank = q / 100.0 * (total - 1)
    seen = 0
    low = high = 0
    for bucket in sorted(b for b, c in buckets.items() if c):
        count = buckets[bucket]
        low, high = bucket_bounds(bucket)
        if rank < seen + count:
            return low + (high - low) * (rank - seen + 0.5) / count
        seen += count
    return float(high)  # not reached: rank < total


@dataclasses.dataclass(frozen=True)
class DurationStats:
    """One figure's count, and the mean, p50 and p99 in µs of the timed ones (all, or one in
    ``StepClock.SAMPLE_EVERY``; ``nan`` when ``count`` is 0)."""

    count: int
    mean_us: float
    p50_us: float
    p99_us: float

    @classmethod
    def of(cls, count: int, sum_ns: int, buckets: Dict[int, int]) -> "DurationStats":
        """The stats of ``count`` durations whose timed ones, in ``buckets``, sum to ``sum_ns``."""
        timed = sum(buckets.values())
        if count == 0 or timed == 0:
            nan = float("nan")
            return cls(int(count), nan, nan, nan)
        return cls(int(count), sum_ns / timed / 1e3, percentile(buckets, 50.0) / 1e3,
                   percentile(buckets, 99.0) / 1e3)

    def __str__(self) -> str:
        if self.count == 0 or math.isnan(self.mean_us):
            return f"n={self.count}"
        return (f"n={self.count} mean={self.mean_us:.1f}us p50={self.p50_us:.1f}us "
                f"p99={self.p99_us:.1f}us")


@dataclasses.dataclass(frozen=True)
class StepTimings:
    """Where the steps since the last ``timings()`` spent their time (docs/simulators.rst):
    per env id its ``step`` time (``envs``), per lockstep batch the ``wait``, ``spread`` and
    ``handoff``, and a ``note`` of what this front end cannot measure."""

    envs: Tuple[DurationStats, ...]
    wait: DurationStats
    spread: DurationStats
    handoff: DurationStats
    note: str = ""

    def slowest_env(self) -> Optional[int]:
        """The env with the highest p50 step time (``None`` if no env stepped)."""
        stepped = [(s.p50_us, i) for i, s in enumerate(self.envs) if s.count]
        return max(stepped)[1] if stepped else None

    def table(self) -> str:
        """The figures as a fixed-width text table (what ``str()`` gives)."""
        lines = [f"{'':<22}{'count':>8}{'mean us':>11}{'p50 us':>11}{'p99 us':>11}"]
        slowest = self.slowest_env()
        rows = [(f"env {i} step" + (" (slowest)" if i == slowest else ""), stats)
                for i, stats in enumerate(self.envs)]
        rows += [("batch wait", self.wait), ("batch straggler spread", self.spread),
                 ("batch hand-off", self.handoff)]
        for name, stats in rows:
            if stats.count == 0 or math.isnan(stats.mean_us):
                lines.append(f"{name:<22}{stats.count:>8}{'-':>11}{'-':>11}{'-':>11}")
            else:
                lines.append(f"{name:<22}{stats.count:>8}{stats.mean_us:>11.1f}"
                             f"{stats.p50_us:>11.1f}{stats.p99_us:>11.1f}")
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


class StepClock:
    """Counts the steps of a worker's ``num_envs`` envs, timing one in :attr:`SAMPLE_EVERY`:
    what a worker does after reporting a step competes with the trainer for a CPU."""

    #: CLOCK_MONOTONIC on Linux.
    now = staticmethod(time.perf_counter_ns)
    SAMPLE_EVERY = 8
    FOLD_AT = 2048

    def __init__(self, num_envs: int = 1) -> None:
        self.resize(num_envs)

    def resize(self, num_envs: int) -> None:
        """Counts ``num_envs`` envs from now on (what was counted is dropped)."""
        self._samples: List[List[int]] = [[] for _ in range(num_envs)]
        self._steps = [0] * num_envs  # steps counted by record()
        self._ticks = 0               # steps of every env counted by tick()
        self._sums = [0] * num_envs
        self._buckets = np.zeros((num_envs, NUM_BUCKETS), np.int64)
        #: Each env's duration of the timed step in progress (ns).
        self.lap: List[int] = [0] * num_envs
        self._timing = False
        self._countdown = 1  # the next step is timed

    @property
    def num_envs(self) -> int:
        """Envs counted."""
        return len(self._steps)

    def tick(self) -> bool:
        """Counts a step of every env; returns whether to time it (fill :attr:`lap`)."""
        self._ticks += 1
        self._countdown -= 1
        if self._countdown:
            return False
        self._countdown = self.SAMPLE_EVERY
        self._timing = True
        return True

    def reader(self) -> Callable[[], int]:
        """:meth:`tick`, as the clock to time the step with (``int`` reads none)."""
        return StepClock.now if self.tick() else int

    def commit(self) -> None:
        """Counts the durations in :attr:`lap` if the step that just ended was timed."""
        if not self._timing:
            return
        self._timing = False
        for samples, ns in zip(self._samples, self.lap):
            samples.append(ns)
        if len(self._samples[0]) >= self.FOLD_AT:
            for k in range(self.num_envs):
                self._fold(k)

    def record(self, k: int, ns: int) -> None:
        """Counts one step of local env ``k`` that took ``ns`` ns."""
        self._steps[k] += 1
        samples = self._samples[k]
        samples.append(ns)
        if len(samples) >= self.FOLD_AT:
            self._fold(k)

    def _fold(self, k: int) -> None:
        """Moves env ``k``'s kept durations into its sum and histogram."""
        samples = self._samples[k]
        if not samples:
            return
        ns = np.maximum(np.array(samples, dtype=np.int64), 0)
        samples.clear()
        self._sums[k] += int(ns.sum())
        self._buckets[k] += np.bincount(buckets_of(ns), minlength=NUM_BUCKETS)

    def take(self) -> ClockReading:
        """The :data:`ClockReading` since the last take; resets."""
        for k in range(self.num_envs):
            self._fold(k)
        reading = [(steps + self._ticks, total, {int(b): int(row[b]) for b in np.flatnonzero(row)})
                   for steps, total, row in zip(self._steps, self._sums, self._buckets)]
        self.resize(self.num_envs)
        return reading


def buckets_of(ns: "npt.NDArray[np.int64]") -> "npt.NDArray[np.int64]":
    """:func:`bucket_of` of each duration of ``ns`` (int64 ns, ``0 <= ns < 2**53``)."""
    # frexp's exponent of an integer exact as a float64 is its bit length.
    bits = np.frexp(ns.astype(np.float64))[1].astype(np.int64)
    shifted = ns >> np.maximum(bits - 4, 0)
    return np.where(bits < 4, ns, ((bits - 3) << 3) | (shifted & 7))


def env_figures(readings: Sequence[ClockReading]) -> Tuple[DurationStats, ...]:
    """The per-env stats of the workers' readings, in worker order (env id order)."""
    return tuple(DurationStats.of(count, total, buckets)
                 for reading in readings for count, total, buckets in reading)


def batch_figures(taken: Tuple[int, Tuple[int, int, int], "npt.NDArray[np.uint64]"]
                  ) -> Tuple[DurationStats, DurationStats, DurationStats]:
    """``(wait, spread, handoff)`` of what ``Controller.take_timings()`` returned."""
    count, sums, histograms = taken
    wait, spread, handoff = (
        DurationStats.of(count, int(total), {b: int(c) for b, c in enumerate(histogram) if c})
        for total, histogram in zip(sums, histograms))
    return wait, spread, handoff


class BatchClock:
    """The per-batch wait measured in Python, where there are no job slots."""

    def __init__(self) -> None:
        self._clock = StepClock(1)

    def record(self, ns: int) -> None:
        """Counts one batch whose wait took ``ns`` ns."""
        self._clock.record(0, ns)

    def take(self) -> DurationStats:
        """The waits since the last take; resets."""
        ((count, total, buckets),) = self._clock.take()
        return DurationStats.of(count, total, buckets)


def no_figure() -> DurationStats:
    """The stats of a figure that was not measured."""
    return DurationStats.of(0, 0, {})
