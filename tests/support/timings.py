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
