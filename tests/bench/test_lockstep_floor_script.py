"""benchmarks/lockstep_floor.py: the floor of a lockstep step, and the bounds it gives."""

import json
import math

import gymnasium as gym
import numpy as np
import pytest

from tests.support.scripts import load_benchmark_script


@pytest.fixture(scope="module")
def floor():
    return load_benchmark_script("lockstep_floor")


def test_replay_envs_give_a_vector_env_the_recorded_step_value_for_value(floor):
    from alf_env.vector import FastVectorEnv

    factory = floor.ReplayFactory("HalfCheetah-v5", np.zeros(6, np.float32))
    env = factory()
    probe = gym.make("HalfCheetah-v5")
    assert env.observation_space == probe.observation_space
    probe.close()
    assert sorted(factory.args[4]) == ["reward_ctrl", "reward_forward", "x_position",
                                       "x_velocity"]
    actions = np.zeros((3, 6), np.float32)
    sync = gym.vector.SyncVectorEnv([factory] * 3)
    fast = FastVectorEnv([factory] * 3)
    try:
        for a, b in zip(sync.reset(seed=0), fast.reset(seed=0)):
            np.testing.assert_equal(a, b)
        for _ in range(3):
            expected, got = sync.step(actions), fast.step(actions)
            for a, b in zip(expected, got):
                np.testing.assert_equal(a, b)
            assert got[4]["x_position"].dtype == expected[4]["x_position"].dtype
    finally:
        sync.close()
        fast.close()
    # Each step is a copy: a caller writing into it changes no later step.
    first = env.step(None)[0]
    first[:] = 7.0
    assert not np.array_equal(env.step(None)[0], first)


def test_expected_slowest_is_the_mean_of_the_largest_worker_sum(floor):
    constant = np.full(100, 2.0)
    assert floor.expected_slowest(constant, [4, 4]) == pytest.approx(8.0)
    # Two workers of one env, step times 0 or 1 equally likely: E[max] = 3/4.
    assert floor.expected_slowest(np.array([0.0, 1.0]), [1, 1]) == pytest.approx(0.75, abs=0.01)
    # Uneven workers: three steps of 1 or 3 always outlast one (E = 3 x 2).
    assert floor.expected_slowest(np.array([1.0, 3.0]), [3, 1]) == pytest.approx(6.0, abs=0.02)


def test_the_bare_hand_off_is_timed_and_its_workers_leave(floor):
    # How long it takes depends on the machine's load: only that it was timed.
    seconds = floor.native_hand_off_seconds(2, steps=200)
    assert math.isfinite(seconds) and seconds > 0


# floor_of's timings (positive), and its terms made of two or more timings,
# which a busy machine can make negative (e.g. fixed = a vector step minus the
# env steps it holds).
MEASURED = ("env_step_us", "slowest_worker_us", "replay_step_us", "native_hand_off_us",
            "fast_vector_step_us", "torch_conversions_us")
DIFFERENCES = ("straggle_us", "fixed_us", "ceiling_bound", "fixed_needed_us",
               "fast_vector_ceiling", "fast_parallel_bound")


def test_floor_of_combines_its_terms_into_the_two_bounds(floor):
    out = floor.floor_of("CartPole-v1", num_envs=4, steps=200)
    assert out["workers"] == min(out["cpus"], 4)
    per_ceiling = 4 / out["cpus"] * out["env_step_us"]
    assert out["ceiling_bound"] == pytest.approx(
        per_ceiling / (out["slowest_worker_us"] + out["fixed_us"]))
    assert out["fixed_needed_us"] == pytest.approx(
        per_ceiling / floor.CEILING_TARGET - out["slowest_worker_us"])
    assert out["fast_vector_ceiling"] == pytest.approx(per_ceiling / out["fast_vector_step_us"])
    assert out["fast_parallel_bound"] == pytest.approx(
        out["fast_vector_step_us"] / (out["fast_vector_step_us"] + out["torch_conversions_us"]))
    # Timings relate to each other only on a quiet machine: the test checks
    # that each was measured, not how they compare.
    assert set(out) == set(MEASURED) | set(DIFFERENCES) | {"cpus", "workers",
                                                            "env_step_std_us"}
    assert all(math.isfinite(out[key]) and out[key] > 0 for key in MEASURED), out
    assert math.isfinite(out["env_step_std_us"]) and out["env_step_std_us"] >= 0
    assert all(math.isfinite(out[key]) for key in DIFFERENCES), out


def test_main_writes_both_tables_and_the_json(floor, tmp_path, capsys):
    path = tmp_path / "floor.json"
    assert floor.main(["--workload", "CartPole-v1", "--num-envs", "2", "--steps", "100",
                       "--repeats", "2", "--json", str(path)]) == 0
    text = capsys.readouterr().out
    assert "| CartPole-v1 | " in text and "bound on fast_vector/ceiling" in text
    assert "bound on fast/fast_vector" in text
    results = json.loads(path.read_text())
    assert list(results) == ["CartPole-v1"] and len(results["CartPole-v1"]) == 2
