"""The histograms, percentiles and the report type of ``timings()``."""

import dataclasses
import math

import numpy as np
import pytest

from alf_env.control_plane.step_timings import (
    NUM_BUCKETS,
    BatchClock,
    DurationStats,
    StepClock,
    StepTimings,
    batch_figures,
    bucket_bounds,
    bucket_of,
    buckets_of,
    env_figures,
    no_figure,
    percentile,
)


def _histogram(samples):
    buckets = {}
    for ns in samples:
        b = bucket_of(int(ns))
        buckets[b] = buckets.get(b, 0) + 1
    return buckets


def test_every_duration_falls_in_its_bucket_and_buckets_are_at_most_an_eighth_wide():
    for ns in [0, 1, 7, 8, 15, 16, 100, 999, 1000, 65_000, 5_000_000, 10**11, 2**64 - 1]:
        low, high = bucket_bounds(bucket_of(ns))
        assert low <= ns < high
        if ns >= 8:
            assert (high - low) / low <= 1 / 8
    # Consecutive and covering: each bucket starts where the one before ends.
    for b in range(1, NUM_BUCKETS):
        assert bucket_bounds(b)[0] == bucket_bounds(b - 1)[1]
    assert bucket_bounds(NUM_BUCKETS - 1)[1] == 2**64
    with pytest.raises(ValueError, match="bucket"):
        bucket_bounds(NUM_BUCKETS)


@pytest.mark.parametrize("name, samples", [
    ("uniform µs", np.random.RandomState(0).uniform(50_000, 80_000, 1000)),
    ("lognormal", np.random.RandomState(1).lognormal(11, 1.0, 5000)),
    ("two modes", np.r_[np.full(900, 60_000.0), np.full(100, 5_000_000.0)]),
    ("few", np.array([1200.0, 3400.0, 5600.0])),
])
def test_percentiles_are_within_a_bucket_of_numpys(name, samples):
    samples = samples.astype(np.int64)
    ordered = np.sort(samples)
    buckets = _histogram(samples)
    for q in (0, 1, 25, 50, 90, 99, 100):
        expected = np.percentile(samples, q)
        got = percentile(buckets, q)
        # numpy interpolates between the two samples around the rank; the
        # histogram knows each only to within its bucket.
        rank = q / 100 * (len(samples) - 1)
        below, above = int(ordered[math.floor(rank)]), int(ordered[math.ceil(rank)])
        assert bucket_bounds(bucket_of(below))[0] <= got, (name, q, got, expected)
        assert got <= bucket_bounds(bucket_of(above))[1], (name, q, got, expected)
        if above - below <= below / 8:  # dense samples: within an eighth of numpy's
            assert abs(got - expected) <= expected / 8 + 1, (name, q, got, expected)


def test_percentile_of_nothing_is_nan_and_q_is_checked():
    assert math.isnan(percentile({}, 50))
    with pytest.raises(ValueError, match="q in"):
        percentile({1: 1}, 101)


def test_step_clock_counts_per_env_and_take_resets():
    clock = StepClock(3)
    for ns in (1000, 2000, 3000):
        clock.record(0, ns)
    clock.record(2, 5_000_000)
    reading = clock.take()
    assert [(count, total) for count, total, _ in reading] == [(3, 6000), (0, 0),
                                                               (1, 5_000_000)]
    assert reading[0][2] == _histogram([1000, 2000, 3000])
    assert [count for count, _, _ in clock.take()] == [0, 0, 0]
    stats = env_figures([reading[:2], reading[2:]])  # two workers, env id order
    assert [s.count for s in stats] == [3, 0, 1]
    assert stats[0].mean_us == pytest.approx(2.0)
    assert stats[2].p50_us == pytest.approx(5000, rel=1 / 8)
    assert math.isnan(stats[1].p50_us)


def test_the_vectorized_buckets_are_the_scalar_ones():
    rng = np.random.default_rng(0)
    ns = np.concatenate([np.arange(0, 4096), rng.integers(0, 2**52, 20_000),
                         2 ** np.arange(0, 53), 2 ** np.arange(1, 53) - 1]).astype(np.int64)
    assert buckets_of(ns).tolist() == [bucket_of(int(v)) for v in ns]


def test_step_clock_folds_its_kept_durations_into_the_same_histogram():
    rng = np.random.default_rng(1)
    samples = rng.integers(1_000, 10_000_000, StepClock.FOLD_AT * 2 + 17).tolist()
    clock = StepClock(1)
    for ns in samples:
        clock.record(0, ns)
    ((count, total, buckets),) = clock.take()
    assert (count, total) == (len(samples), sum(samples))
    assert buckets == _histogram(samples)


def test_the_row_handlers_steps_are_all_counted_and_one_in_n_is_timed():
    clock = StepClock(2)
    timed = []
    for _ in range(3 * StepClock.SAMPLE_EVERY + 1):
        timed.append(clock.tick())
        clock.lap[:] = [1000, 3000]  # what a timed step stores (an untimed one: ignored)
        clock.commit()
    assert [i for i, t in enumerate(timed) if t] == list(range(0, len(timed),
                                                               StepClock.SAMPLE_EVERY))
    reading = clock.take()
    assert [steps for steps, _, _ in reading] == [len(timed)] * 2
    assert [sum(buckets.values()) for _, _, buckets in reading] == [sum(timed)] * 2
    stats = env_figures([reading])
    assert [s.count for s in stats] == [len(timed)] * 2
    assert [s.mean_us for s in stats] == [1.0, 3.0]  # the timed steps' mean
    assert clock.reader() is StepClock.now  # a take starts again with a timed step
    assert clock.reader() is int  # then one that reads no clock


def test_a_figure_with_steps_but_no_timed_step_has_no_duration():
    stats = DurationStats.of(3, 0, {})
    assert stats.count == 3 and math.isnan(stats.p50_us)
    assert str(stats) == "n=3"


def test_batch_figures_read_the_controllers_tuple():
    histograms = np.zeros((3, NUM_BUCKETS), np.uint64)
    for figure, ns in enumerate((6_000_000, 5_000_000, 200_000)):
        histograms[figure, bucket_of(ns)] = 2
    wait, spread, handoff = batch_figures((2, (12_000_000, 10_000_000, 400_000), histograms))
    assert (wait.count, wait.mean_us) == (2, 6000.0)
    assert spread.p99_us == pytest.approx(5000, rel=1 / 8)
    assert handoff.mean_us == 200.0


def test_batch_clock():
    clock = BatchClock()
    clock.record(60_000)
    clock.record(80_000)
    stats = clock.take()
    assert stats.count == 2 and stats.mean_us == 70.0
    assert clock.take().count == 0


def test_the_table_names_each_figure_and_the_slowest_env():
    fast = DurationStats(10, 60.0, 58.0, 90.0)
    slow = DurationStats(10, 5000.0, 5100.0, 5600.0)
    timings = StepTimings((fast, slow, fast), DurationStats(10, 5300.0, 5400.0, 6000.0),
                          DurationStats(10, 5000.0, 5100.0, 5500.0), no_figure(),
                          note="a note")
    assert timings.slowest_env() == 1
    text = str(timings)
    lines = text.splitlines()
    assert lines[2].startswith("env 1 step (slowest)") and "5100.0" in lines[2]
    assert lines[4].startswith("batch wait") and "5400.0" in lines[4]
    assert lines[5].startswith("batch straggler spread")
    assert lines[6].split()[-4:] == ["0", "-", "-", "-"]  # not measured
    assert lines[-1] == "a note"
    assert StepTimings((), no_figure(), no_figure(), no_figure()).slowest_env() is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        timings.wait = fast  # frozen: users may keep and log it
