"""What the ``timings()`` tests of every front end share: one slow env of four,
and the check that the figures single it out."""

from alf_env.control_plane.step_timings import StepClock, StepTimings

#: The env that sleeps ``SLOW_S`` in each step.
SLOW_ENV = 2
SLOW_S = 0.005
#: Steps of each test: ten of them timed per env (one in SAMPLE_EVERY).
STEPS = 10 * StepClock.SAMPLE_EVERY


def check_slow_env(timings: StepTimings, num_envs: int = 4, steps: int = STEPS) -> None:
    """Env ``SLOW_ENV``'s p50 near ``SLOW_S``, every other env's far below (wide
    margins: the suite runs beside busy processes)."""
    assert len(timings.envs) == num_envs
    assert [s.count for s in timings.envs] == [steps] * num_envs
    slow = timings.envs[SLOW_ENV].p50_us
    assert 0.9 * SLOW_S * 1e6 <= slow <= 10 * SLOW_S * 1e6
    for i, stats in enumerate(timings.envs):
        if i != SLOW_ENV:
            assert slow >= 3 * stats.p50_us, (i, stats)
    assert timings.slowest_env() == SLOW_ENV


def check_clock_counts(clock: StepClock, steps: int, num_envs: int) -> None:
    """A worker's ``clock`` after ``steps`` steps of its ``num_envs`` envs through a row
    handler: every step counted, the first and then one in ``SAMPLE_EVERY`` timed,
    and counted from zero after the take."""
    reading = clock.take()
    assert [count for count, _, _ in reading] == [steps] * num_envs
    timed = len(range(0, steps, StepClock.SAMPLE_EVERY))
    assert all(total > 0 and sum(buckets.values()) == timed for _, total, buckets in reading)
    assert [count for count, _, _ in clock.take()] == [0] * num_envs
