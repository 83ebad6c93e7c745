"""Choosing, while the env runs, the settings that make the trainer's loop fastest.

Some worker settings (CPU pinning, spinning for the next job, torch's OpenMP
threads spinning after the forward pass) win on a quiet machine and lose,
sometimes many times over, on a shared one, and the load changes during a
training. So :class:`StepTuner` times the trainer's whole *cycle* (step start
to step start, so a setting's cost to the forward pass counts) under each
:class:`Knob`'s two values, in windows ordered current, other, other, current
(a drift of the machine's speed cancels out), and chooses again periodically,
or at once when the cycles become much slower than they settled at.
See docs/benchmarks.md, "What decides these figures".
"""

import enum
import statistics
import time
from typing import Callable, Dict, Hashable, List, NamedTuple, Optional, Sequence

from absl import logging

#: Cycles per timed window at least (each knob's choice times four).
WINDOW_CYCLES = 64
#: Seconds per timed window at least: a window of fast cycles (100 µs) must
#: still span many scheduler time slices, or one of them decides.
WINDOW_S = 0.05
#: Seconds of stepping between two rounds of choices, after a change.
PERIOD_S = 10.0
#: The longest wait between two rounds (after rounds that changed nothing).
MAX_PERIOD_S = 80.0
#: A value whose first window is this many times slower is dropped at once.
CLEAR_LOSS = 1.5
#: Cycles after which a window that clearly loses may end early.
EARLY_CYCLES = 8
#: Cycles longer than this many times their window's median, and longer than
#: OUTLIER_S, are not counted: a training update or a checkpoint between two
#: rollouts. A wait for a busy core's time slice (a few ms) is counted: it is
#: what a setting may cost.
OUTLIER = 8.0
OUTLIER_S = 0.05
#: Cycles per block watched between rounds.
WATCH_CYCLES = 16
#: Consecutive watched blocks whose median cycle is :data:`DRIFT` times the
#: shortest window mean of the last round start a round at once: the load
#: changed, or the loop fell into a slow state (the trainer's OpenMP threads
#: sharing its core made HalfCheetah's cycles 15-20x longer for seconds;
#: timing the knobs again switched it out). Beside a busy process single
#: blocks swing 2x; a reference that also took the shortest block median
#: started 32 rounds in 60 s there.
WATCH_BLOCKS = 4
DRIFT = 2.0


class Knob:
    """One setting the tuner chooses: a preferred and an alternative value.

    Args:
        apply: ``apply(value)`` puts a value into effect (at a step's start).
        margin: the fraction by which the alternative's mean cycle must be
            shorter to be chosen.
        available: whether the knob can act now (checked each round); if not,
            it keeps its value and is not timed.
        window_s: seconds per timed window at least, where more than the
            tuner's own: a value whose cost comes as rare long cycles needs
            windows long enough to hold several of them.
    """

    def __init__(self, name: str, preferred: Hashable, alternative: Hashable,
                 apply: Callable[[Hashable], None], margin: float,
                 available: Callable[[], bool] = lambda: True,
                 window_s: float = 0.0) -> None:
        self.name = name
        self.window_s = window_s
        self.preferred = preferred
        self.alternative = alternative
        self.margin = margin
        self.available = available
        self.value = preferred
        self._apply = apply

    def set(self, value: Hashable) -> None:
        """Applies ``value`` unless it is already the current one."""
        if value != self.value:
            self._apply(value)
            self.value = value

    def other(self) -> Hashable:
        return self.alternative if self.value == self.preferred else self.preferred


class Decision(NamedTuple):
    """One choice of a knob's value.

    Attributes:
        knob: the knob's name.
        preferred_s: mean seconds per cycle at the preferred value.
        alternative_s: mean seconds per cycle at the alternative value.
        chosen: the value kept.
    """
    knob: str
    preferred_s: float
    alternative_s: float
    chosen: Hashable


class _Phase(enum.Enum):
    TIMING = "timing"
    SETTLED = "settled"


def trimmed_mean(cycles: Sequence[float]) -> float:
    """The mean of ``cycles`` without the outliers (:data:`OUTLIER`, :data:`OUTLIER_S`)."""
    limit = max(OUTLIER * statistics.median(cycles), OUTLIER_S)
    kept = [c for c in cycles if c <= limit]
    return sum(kept) / len(kept)


class StepTuner:
    """Times the trainer's cycles under each knob's values and keeps the faster.

    Call :meth:`step_started` at the start of every lockstep step. Each round
    that changes nothing doubles the wait before the next, up to
    ``max_period_s``, so windows at a losing value cost a steady loop little.

    Args:
        knobs: the settings to choose, in the order they are timed.
        before_step: called at every step's start, after the timing (e.g. an
            :class:`~alf_env.control_plane.openmp.OpenMpPause` a knob switches).
        window, window_s: cycles and seconds per timed window, at least.
        period_s: seconds of stepping between two rounds after a change.
        max_period_s: the longest wait between two rounds.
    """

    def __init__(self, knobs: Sequence[Knob], before_step: Sequence[Callable[[], None]] = (),
                 window: int = WINDOW_CYCLES, window_s: float = WINDOW_S,
                 period_s: float = PERIOD_S, max_period_s: float = MAX_PERIOD_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.knobs = list(knobs)
        self.window = window
        self.window_s = window_s
        self.period_s = period_s
        self.max_period_s = max_period_s
        #: Seconds until the next round (``period_s``, doubled by quiet rounds).
        self.wait_s = period_s
        self.decisions: List[Decision] = []
        self.before_step = list(before_step)
        self._clock = clock
        self._phase = _Phase.SETTLED
        self._settled_until = -float("inf")  # start the first round at once
        self._last: Optional[float] = None
        self._skip = True  # the cycle in which a value changed is not counted
        self._round: List[Knob] = []  # knobs still to time in this round
        self._plan: List[Hashable] = []  # values of the current knob's windows
        self._cycles: List[float] = []
        self._window_total = 0.0  # seconds of the cycles in the current window
        self._times: Dict[Hashable, List[float]] = {}
        self._changed = False  # whether this round changed a value
        self._first: Hashable = None  # the current knob's value when its timing began
        self._watched: List[float] = []  # cycles of the current watched block
        self._reference_s = float("inf")  # the last round's shortest window mean
        self._slow_blocks = 0  # consecutive watched blocks slower by DRIFT

    @property
    def values(self) -> Dict[str, Hashable]:
        """The current value of each knob, by name."""
        return {k.name: k.value for k in self.knobs}

    def step_started(self) -> None:
        """Counts the cycle that ends here and moves the tuner on."""
        now = self._clock()
        last, self._last = self._last, now
        if self._phase is _Phase.SETTLED:
            if now >= self._settled_until:
                self._start_round()
            elif last is not None:
                self._watch(now - last)
        elif last is not None:
            self._count(now - last)
        self.run_before_step()

    def run_before_step(self) -> None:
        """Runs the ``before_step`` actions (what :meth:`step_started` does after
        its timing; a frozen tuner's step hook)."""
        for action in self.before_step:
            action()

    def _watch(self, seconds: float) -> None:
        """Starts a round at once after :data:`WATCH_BLOCKS` blocks of cycles
        :data:`DRIFT` times slower than the last round's shortest window (block
        medians: a training update between rollouts is one long cycle, not a
        slower loop)."""
        self._watched.append(seconds)
        if len(self._watched) < WATCH_CYCLES:
            return
        median = statistics.median(self._watched)
        self._watched = []
        self._slow_blocks = self._slow_blocks + 1 if median > DRIFT * self._reference_s else 0
        if self._slow_blocks >= WATCH_BLOCKS:
            logging.info("alf_env: the loop's cycles became %.1fx slower (%.0f us); timing "
                         "its settings again", median / self._reference_s, median * 1e6)
            self.wait_s = self.period_s
            self._start_round()

    def _start_round(self) -> None:
        self._watched, self._reference_s, self._slow_blocks = [], float("inf"), 0
        self._round = [k for k in self.knobs if k.available()]
        self._phase = _Phase.TIMING
        self._changed = False
        self._next_knob()

    def _next_knob(self) -> None:
        if not self._round:
            self._phase = _Phase.SETTLED
            self.wait_s = (self.period_s if self._changed
                           else min(2 * self.wait_s, self.max_period_s))
            self._settled_until = self._clock() + self.wait_s
            return
        knob = self._round[0]
        current, other = knob.value, knob.other()
        self._first = current
        self._plan = [current, other, other, current]
        self._times = {current: [], other: []}
        self._cycles, self._window_total = [], 0.0
        self._skip = True

    def _count(self, seconds: float) -> None:
        if self._skip:  # the cycle that straddled a change of value
            self._skip = False
            return
        self._cycles.append(seconds)
        self._window_total += seconds
        knob = self._round[0]
        early = self._clearly_losing()
        if not early and (len(self._cycles) < self.window
                          or self._window_total < max(self.window_s, knob.window_s)):
            return
        mean = trimmed_mean(self._cycles)
        self._times[self._plan.pop(0)].append(mean)
        self._reference_s = min(self._reference_s, mean)
        self._cycles, self._window_total = [], 0.0
        first = self._times[self._first]
        second = self._times[knob.other() if knob.value == self._first else knob.value]
        if early or (len(self._plan) == 2 and second[0] >= CLEAR_LOSS * first[0]):
            self._plan = []  # the other value clearly loses: back at once
            knob.set(self._first)
        if self._plan:
            if self._plan[0] != knob.value:
                knob.set(self._plan[0])
                self._skip = True
            return
        self._decide(knob)
        self._round.pop(0)
        self._next_knob()

    def _clearly_losing(self) -> bool:
        """Whether the other value's first window already loses by :data:`CLEAR_LOSS`.

        Its median over :data:`EARLY_CYCLES` cycles says so long before the window's
        end, which matters when it is many times slower: timing it longer only costs.
        """
        if len(self._plan) != 3 or len(self._cycles) < EARLY_CYCLES:
            return False
        first = self._times[self._first]
        return statistics.median(self._cycles) >= CLEAR_LOSS * first[0]

    def _decide(self, knob: Knob) -> None:
        preferred = statistics.fmean(self._times[knob.preferred])
        alternative = statistics.fmean(self._times[knob.alternative])
        chosen = (knob.alternative if alternative < preferred * (1.0 - knob.margin)
                  else knob.preferred)
        self.decisions.append(Decision(knob.name, preferred, alternative, chosen))
        if chosen != knob.value:
            self._changed = True
            logging.info("alf_env: %s=%s makes the loop faster here (%.0f us per step, "
                         "against %.0f us); switching", knob.name, chosen,
                         min(preferred, alternative) * 1e6, max(preferred, alternative) * 1e6)
            knob.set(chosen)
