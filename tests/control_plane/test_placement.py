"""alf_env.control_plane.placement: which placement the tuner picks from the step times
it sees, and that it really moves the workers."""

import os
import time

import pytest

from alf_env.control_plane.affinity import normal_scheduling
from alf_env.control_plane.placement import Decision, Placement, PlacementTuner, place_workers


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(window=4, period_s=10.0, margin=0.03):
    moves = []
    clock = FakeClock()
    tuner = PlacementTuner([], [], window=window, period_s=period_s, margin=margin,
                           apply=moves.append, clock=clock)
    return tuner, moves, clock


def feed(tuner, *, pinned_s, os_s, steps):
    """``steps`` steps whose time depends on where the tuner has the workers now."""
    for _ in range(steps):
        tuner.observe(pinned_s if tuner.placement is Placement.PINNED else os_s)


def test_a_quiet_machine_keeps_the_workers_pinned():
    tuner, moves, _ = make()
    feed(tuner, pinned_s=100e-6, os_s=105e-6, steps=8)
    assert tuner.decisions == [Decision(100e-6, 105e-6, Placement.PINNED)]
    assert tuner.placement is Placement.PINNED
    assert moves == [Placement.OS, Placement.PINNED]  # tried, then moved back


def test_the_os_placement_must_win_by_the_margin():
    tuner, _, _ = make(margin=0.03)
    feed(tuner, pinned_s=100e-6, os_s=98e-6, steps=8)  # 2% faster: not enough
    assert tuner.decisions[-1].chosen is Placement.PINNED
    tuner, _, _ = make(margin=0.03)
    feed(tuner, pinned_s=100e-6, os_s=90e-6, steps=8)
    assert tuner.decisions[-1].chosen is Placement.OS


def test_a_core_held_by_another_process_unpins_the_workers():
    tuner, moves, _ = make()
    feed(tuner, pinned_s=4e-3, os_s=200e-6, steps=8)  # time-slice waits when pinned
    assert tuner.placement is Placement.OS and moves == [Placement.OS]
    assert tuner.decisions == [Decision(4e-3, 200e-6, Placement.OS)]


def test_it_holds_its_choice_for_the_period_then_chooses_again_as_the_load_changes():
    tuner, moves, clock = make(period_s=10.0)
    feed(tuner, pinned_s=4e-3, os_s=200e-6, steps=8)
    feed(tuner, pinned_s=100e-6, os_s=120e-6, steps=50)  # the load went away...
    assert len(tuner.decisions) == 1 and tuner.placement is Placement.OS  # ...not yet seen
    clock.now = 10.5
    feed(tuner, pinned_s=100e-6, os_s=120e-6, steps=9)  # 1 to start + 2 windows
    assert tuner.decisions[-1] == Decision(100e-6, 120e-6, Placement.PINNED)
    assert tuner.placement is Placement.PINNED
    assert moves == [Placement.OS, Placement.PINNED]


def test_place_workers_pins_and_unpins_a_real_process_and_skips_a_dead_one():
    allowed = sorted(os.sched_getaffinity(0))
    pid = os.fork()
    if pid == 0:  # a child that only waits to be moved
        time.sleep(30)
        os._exit(0)
    try:
        place_workers([pid, 2 ** 22 + 12345], [allowed[-1], allowed[0]], Placement.PINNED)
        assert os.sched_getaffinity(pid) == {allowed[-1]}
        place_workers([pid], [allowed[-1]], Placement.OS)
        assert sorted(os.sched_getaffinity(pid)) == allowed
        if hasattr(os, "SCHED_BATCH"):
            os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
            normal_scheduling([pid, 2 ** 22 + 12345])
            assert os.sched_getscheduler(pid) == os.SCHED_OTHER
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("window", [1, 3])
def test_every_decision_follows_one_window_of_each(window):
    tuner, _, clock = make(window=window, period_s=0.0)
    for k in range(20):
        clock.now = k
        feed(tuner, pinned_s=1.0, os_s=2.0, steps=1)
    # Each cycle: (after the first) one step to leave SETTLED, then two windows.
    assert len(tuner.decisions) >= 20 // (2 * window + 1) - 1
    assert all(d.chosen is Placement.PINNED for d in tuner.decisions)


needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                    reason="pinning needs at least 2 usable CPUs")


def _tuner_of(env):
    timer = env._board.step_timer
    return None if timer is None else timer.__self__


@needs_two_cpus
@pytest.mark.parametrize("front_end", ["vector", "fast_parallel"])
def test_default_shared_memory_front_ends_tune_their_placement_and_move_the_workers(
        front_end):
    import gymnasium as gym
    import numpy as np

    cpus = len(os.sched_getaffinity(0))
    if front_end == "vector":
        from alf_env.vector import FastVectorEnv
        env = FastVectorEnv([lambda: gym.make("CartPole-v1")] * (2 * cpus))
        pids = [w.pid for w in env._workers]
        env.reset(seed=0)
        step = lambda: env.step(np.zeros(env.num_envs, np.int64))  # noqa: E731
    else:
        import torch

        from alf_env.environments import suite_gym
        from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
        env = FastParallelEnvironment([lambda env_id: suite_gym.load("CartPole-v1",
                                                                      env_id=env_id)]
                                      * (2 * cpus))
        pids = [e.pid for e in env._envs]
        env.reset()
        step = lambda: env.step(torch.zeros(env.batch_size, dtype=torch.int64))  # noqa: E731
    try:
        tuner = _tuner_of(env)
        assert tuner is not None and tuner.placement is Placement.PINNED
        assert all(os.sched_getscheduler(pid) == os.SCHED_OTHER for pid in pids)
        assert [len(os.sched_getaffinity(pid)) for pid in pids] == [1] * len(pids)
        for _ in range(2 * tuner.window + 1):
            step()
        assert len(tuner.decisions) == 1
        chosen = tuner.decisions[0].chosen
        assert tuner.placement is chosen
        expected = 1 if chosen is Placement.PINNED else cpus
        assert [len(os.sched_getaffinity(pid)) for pid in pids] == [expected] * len(pids)
    finally:
        env.close()


@needs_two_cpus
@pytest.mark.parametrize("worker_cpus", ["spread", None])
def test_a_placement_the_user_asked_for_is_kept(worker_cpus):
    import gymnasium as gym

    from alf_env.vector import FastVectorEnv
    env = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 4, worker_cpus=worker_cpus)
    try:
        assert env._board.step_timer is None
        assert all(os.sched_getscheduler(w.pid) == os.SCHED_OTHER for w in env._workers)
    finally:
        env.close()
