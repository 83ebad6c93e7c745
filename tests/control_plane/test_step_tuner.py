"""alf_env.control_plane.step_tuner: which values the tuner keeps from the cycles it
sees (a simulated clock: each cycle costs what the current values cost)."""

from typing import Callable, Dict, List

import pytest

from alf_env.control_plane.step_tuner import Decision, Knob, StepTuner, trimmed_mean


class Loop:
    """A trainer's loop on a simulated clock."""

    def __init__(self, knobs: List[Knob], window: int = 4, period_s: float = 10.0,
                 before_step=()) -> None:
        self.now = 0.0
        self.tuner = StepTuner(knobs, before_step=before_step, window=window, window_s=0.0,
                               period_s=period_s, clock=lambda: self.now)

    def run(self, cycles: int, cost: Callable[[Dict[str, object]], float]) -> None:
        for _ in range(cycles):
            self.tuner.step_started()
            self.now += cost(self.tuner.values)


def knob(name: str = "spin", margin: float = 0.05, moves: List = None, **kwargs) -> Knob:
    moves = [] if moves is None else moves
    return Knob(name, "short", "long", moves.append, margin, **kwargs)


def decided(*decisions: Decision) -> List[Decision]:
    """``decisions`` with their times compared approximately (a float clock)."""
    return [Decision(d.knob, pytest.approx(d.preferred_s), pytest.approx(d.alternative_s),
                     d.chosen) for d in decisions]


def by_value(**costs: float) -> Callable[[Dict[str, object]], float]:
    return lambda values: costs[values["spin"]]


def test_when_the_values_cost_the_same_the_preferred_one_is_kept():
    moves = []
    loop = Loop([knob(moves=moves)])
    loop.run(20, by_value(short=100e-6, long=100e-6))
    assert loop.tuner.decisions == decided(Decision("spin", 100e-6, 100e-6, "short"))
    assert loop.tuner.values == {"spin": "short"}
    assert moves == ["long", "short"]  # tried, then put back


@pytest.mark.parametrize("long_s, chosen", [(97e-6, "short"), (90e-6, "long")])
def test_the_alternative_must_win_by_the_knobs_margin(long_s, chosen):
    loop = Loop([knob(margin=0.05)])
    loop.run(20, by_value(short=100e-6, long=long_s))
    assert loop.tuner.decisions[-1].chosen == chosen
    assert loop.tuner.values == {"spin": chosen}


def test_it_times_the_cycle_so_a_cost_to_the_trainers_own_work_counts():
    # The step is as fast either way, but one value slows the policy's forward pass:
    # only the whole cycle shows it, and that is what the tuner times.
    loop = Loop([knob()])
    loop.run(20, lambda values: 300e-6 + (400e-6 if values["spin"] == "long" else 0.0))
    assert loop.tuner.decisions == decided(Decision("spin", 300e-6, 700e-6, "short"))


def test_a_drifting_machine_does_not_decide_by_itself():
    # Every cycle is faster than the one before, whatever the value, so the value
    # timed second would look 4% faster: timing them in the order current, other,
    # other, current cancels the drift.
    loop = Loop([knob(margin=0.01)])
    cycle = [0]

    def drifting(values):
        cycle[0] += 1
        return 100e-6 * (1 - 0.01 * cycle[0])

    loop.run(20, drifting)
    decision, = loop.tuner.decisions
    assert decision.chosen == "short"
    assert decision.preferred_s == pytest.approx(decision.alternative_s)


def test_a_long_pause_between_rollouts_is_not_counted():
    loop = Loop([knob(margin=0.05)], window=8)
    cycle = [0]

    def with_an_update(values):
        cycle[0] += 1
        if cycle[0] == 5:  # a training update while the preferred value is timed
            return 2.0
        return 100e-6 if values["spin"] == "short" else 110e-6

    loop.run(40, with_an_update)
    assert loop.tuner.decisions[0].chosen == "short"
    assert loop.tuner.decisions[0].preferred_s == pytest.approx(100e-6)
    assert trimmed_mean([1.0, 1.0, 1.0, 100.0]) == 1.0


def test_waits_for_a_busy_cores_time_slice_count():
    # Pinned to a core a busy process holds, a worker now and then waits a 4 ms
    # time slice: that is the cost of pinning, not an outlier to drop.
    loop = Loop([knob("placement", margin=0.2)], window=20)
    cycle = [0]

    def busy_core(values):
        cycle[0] += 1
        if values["placement"] == "short" and cycle[0] % 5 == 0:
            return 4e-3
        return 100e-6

    loop.run(4 * 20 + 5, busy_core)
    assert loop.tuner.values == {"placement": "long"}
    assert trimmed_mean([100e-6] * 4 + [4e-3]) == pytest.approx(880e-6)


def test_it_keeps_its_choice_for_the_period_then_chooses_again_as_the_load_changes():
    loop = Loop([knob()], period_s=10.0)
    loop.run(20, by_value(short=100e-6, long=50e-6))  # e.g. a loop of steps alone
    assert loop.tuner.values == {"spin": "long"}
    loop.run(200, by_value(short=60e-6, long=90e-6))  # 1.8x slower: not a drift
    assert len(loop.tuner.decisions) == 1  # not yet looked at again
    loop.now += 10.0
    loop.run(20, by_value(short=60e-6, long=90e-6))
    assert loop.tuner.decisions[-1:] == decided(Decision("spin", 60e-6, 90e-6, "short"))
    assert loop.tuner.values == {"spin": "short"}


def test_a_loop_that_becomes_much_slower_chooses_again_at_once():
    loop = Loop([knob()], period_s=10.0)
    loop.run(20, by_value(short=100e-6, long=50e-6))
    loop.run(200, by_value(short=100e-6, long=400e-6))  # a policy came into the loop
    assert loop.now < 10.0
    assert loop.tuner.decisions[-1:] == decided(Decision("spin", 100e-6, 400e-6, "short"))
    assert loop.tuner.values == {"spin": "short"}


def test_knobs_are_chosen_one_after_the_other_each_with_the_others_as_chosen():
    knobs = [knob("placement", margin=0.2), knob("spin")]
    loop = Loop(knobs)

    def cost(values):
        base = 100e-6 if values["placement"] == "long" else 400e-6  # a busy core
        return base * (0.5 if values["spin"] == "long" else 1.0)

    loop.run(40, cost)
    assert [(d.knob, d.chosen) for d in loop.tuner.decisions] == [("placement", "long"),
                                                                   ("spin", "long")]
    # The spin was timed with the workers already placed as chosen.
    assert loop.tuner.decisions[1].preferred_s == pytest.approx(100e-6)


def test_a_knob_that_cannot_act_is_left_alone_until_it_can():
    can = [False]
    moves = []
    loop = Loop([knob("openmp_pause", moves=moves, available=lambda: can[0])])
    loop.run(40, lambda values: 100e-6)
    assert loop.tuner.decisions == [] and moves == []
    can[0] = True  # e.g. torch was imported after the env started
    loop.now += loop.tuner.wait_s
    loop.run(40, lambda values: 100e-6 if values["openmp_pause"] == "short" else 60e-6)
    assert loop.tuner.decisions == decided(Decision("openmp_pause", 100e-6, 60e-6, "long"))


def test_the_step_actions_run_at_every_step():
    calls = []
    loop = Loop([knob()], before_step=[lambda: calls.append(1)])
    loop.run(7, by_value(short=1e-4, long=1e-4))
    assert len(calls) == 7


def test_the_first_choice_is_made_within_a_few_windows():
    loop = Loop([knob()], window=64)
    loop.run(4 * 64 + 4, by_value(short=100e-6, long=50e-6))
    assert len(loop.tuner.decisions) == 1


def test_a_value_that_clearly_loses_is_dropped_after_one_window():
    moves = []
    loop = Loop([knob(moves=moves)], window=4)
    loop.run(12, by_value(short=100e-6, long=400e-6))  # e.g. spinning through torch's work
    assert loop.tuner.decisions == decided(Decision("spin", 100e-6, 400e-6, "short"))
    assert moves == ["long", "short"]
    assert loop.tuner.values == {"spin": "short"}


def test_rounds_that_change_nothing_wait_longer_and_a_change_shortens_the_wait_again():
    loop = Loop([knob()], period_s=10.0)
    loop.tuner.max_period_s = 40.0
    same = by_value(short=100e-6, long=100e-6)
    waits = []
    for _ in range(4):
        loop.run(20, same)
        waits.append(loop.tuner.wait_s)
        loop.now += loop.tuner.wait_s
    assert waits == [20.0, 40.0, 40.0, 40.0]
    loop.run(20, by_value(short=100e-6, long=50e-6))
    assert loop.tuner.values == {"spin": "long"} and loop.tuner.wait_s == 10.0


def test_a_window_of_fast_cycles_lasts_its_minimum_time():
    loop = Loop([knob()], window=4)
    loop.tuner.window_s = 0.01
    loop.run(4 * 4 + 3, by_value(short=100e-6, long=50e-6))
    assert loop.tuner.decisions == []  # 4 cycles of 100 µs are not a window of 10 ms
    loop.run(4 * 100 + 200 + 3, by_value(short=100e-6, long=50e-6))
    assert loop.tuner.decisions == decided(Decision("spin", 100e-6, 50e-6, "long"))


def stalling(every: int) -> Callable[[Dict[str, object]], float]:
    """Cycles of 100 µs at "short"; 50 µs at "long", but every ``every``-th is a
    4 ms stall."""
    longs = []

    def cost(values):
        if values["spin"] == "short":
            return 100e-6
        longs.append(1)
        return 4e-3 if len(longs) % every == 0 else 50e-6

    return cost


def test_a_knob_may_ask_for_longer_windows_than_the_tuner():
    # Windows of 4 cycles miss the stalls and choose "long"; windows of 0.1 s
    # hold several and keep "short".
    short_windows = Loop([knob()], window=4)
    short_windows.run(40, stalling(every=20))
    assert short_windows.tuner.decisions[0].chosen == "long"
    long_windows = Loop([knob(window_s=0.1)], window=4)
    long_windows.run(40, stalling(every=20))
    assert long_windows.tuner.decisions == []  # still in its first window
    long_windows.run(4000, stalling(every=20))
    decision = long_windows.tuner.decisions[0]
    assert decision.chosen == "short"
    assert decision.alternative_s > decision.preferred_s


def test_a_value_many_times_slower_is_dropped_within_a_few_cycles():
    loop = Loop([knob()], window=64)
    spent = []

    def cost(values):
        spent.append(values["spin"])
        return 100e-6 if values["spin"] == "short" else 4e-3  # spinning on a busy core

    loop.run(64 + 2 + 12, cost)
    assert loop.tuner.decisions == decided(Decision("spin", 100e-6, 4e-3, "short"))
    assert spent.count("long") == 9  # the skipped first cycle and 8 more, not 64


def test_cycles_that_become_much_slower_start_a_round_at_once():
    loop = Loop([knob()], window=4, period_s=10.0)
    loop.run(40, by_value(short=100e-6, long=200e-6))
    assert [d.chosen for d in loop.tuner.decisions] == ["short"]
    loop.run(200, by_value(short=110e-6, long=200e-6))  # machine noise: no round
    assert len(loop.tuner.decisions) == 1
    # The loop falls into a slow state that switching the knob ends (the
    # long value is fast now): well before the 10 s period, a round runs.
    loop.run(100, by_value(short=3e-3, long=200e-6))
    assert loop.now < 10.0
    assert [d.chosen for d in loop.tuner.decisions] == ["short", "long"]


def test_a_long_cycle_now_and_then_is_not_a_slower_loop():
    # A training update between rollouts: one long cycle in every 32.
    cycles = iter(range(10 ** 6))
    loop = Loop([knob()], window=4)
    loop.run(2000, lambda values: 50e-3 if next(cycles) % 32 == 31 else 100e-6)
    assert len(loop.tuner.decisions) == 1


def test_a_slow_state_that_starts_during_a_round_is_caught_after_it():
    # The first knob keeps "short"; while the second is timed, the loop falls
    # into a slow state at pause="short" that only pause="long" ends.
    loop = Loop([knob("pause"), knob("spin")], window=4)
    slow = [False]

    def cost(values):
        if len(loop.tuner.decisions) == 1:
            slow[0] = True
        if slow[0] and values["pause"] == "short":
            return 3e-3
        return 100e-6

    loop.run(200, cost)
    assert loop.now < 10.0
    assert [(d.knob, d.chosen) for d in loop.tuner.decisions][:3] == [
        ("pause", "short"), ("spin", "short"), ("pause", "long")]


def test_after_a_round_for_a_slower_loop_the_new_speed_is_the_reference():
    # A busy process starts: every value is 3x slower for good. One round, then
    # the tuner settles at the new speed instead of timing again and again.
    loop = Loop([knob()], window=4)
    loop.run(40, by_value(short=100e-6, long=200e-6))
    loop.run(2000, by_value(short=300e-6, long=600e-6))
    assert len(loop.tuner.decisions) == 2


def test_blocks_that_swing_beside_a_busy_process_start_no_round():
    # Every other block of 16 cycles is 3x slower (a busy core's time slices):
    # never four slow blocks in a row, so no round before the period.
    cycles = iter(range(10 ** 6))
    loop = Loop([knob()], window=4, period_s=10.0)
    loop.run(20, by_value(short=100e-6, long=200e-6))
    loop.run(4000, lambda values: 300e-6 if (next(cycles) // 16) % 2 else 100e-6)
    assert loop.now < 10.0
    assert len(loop.tuner.decisions) == 1
