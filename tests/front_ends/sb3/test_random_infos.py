"""FastSubprocVecEnv's per-env infos against SB3's DummyVecEnv: each env's info dict
comes back as the env wrote it (same keys, values, Python and numpy types), for
random info dicts per env and step (tests/support/random_infos.py) and for each
kind the shared-memory rows could change; numeric infos stay off the pipe.

An env that reuses its info dict (or observation array) and overwrites it in
``reset()`` gets the finished step's values in its info and
``terminal_observation``; DummyVecEnv, which keeps a reference to the reused
dict, shows what ``reset()`` wrote instead, so such envs are compared with the
anchor's run of the same env returning new dicts.
"""

import functools
from typing import Any, Dict, List

import numpy as np
import psutil
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from alf_env.sb3 import FastSubprocVecEnv
from tests.support.gym_envs import NumericInfoEnv
from tests.support.random_infos import ScriptedInfoEnv, assert_same, kinds_seen, make_env

NUM_ENVS = 3
STEPS = 300


def assert_same_results(anchor: DummyVecEnv, ours: FastSubprocVecEnv, expected: Any,
                        got: Any, where: str) -> None:
    assert_same(expected, got, where)
    assert_same(anchor.reset_infos, ours.reset_infos, f"{where}: reset_infos")


def test_random_infos_match_dummy_vec_env():
    # Env 1 reuses one info dict, cleared and refilled by each step and reset.
    anchor = DummyVecEnv([functools.partial(make_env, "sb3", False)] * NUM_ENVS)
    ours = FastSubprocVecEnv([functools.partial(make_env, "sb3", i == 1)
                              for i in range(NUM_ENVS)], start_method="fork", num_workers=2)
    seen: List[Dict[Any, Any]] = []
    ends = 0
    try:
        for vec_env in (anchor, ours):
            vec_env.seed(11)
        assert_same_results(anchor, ours, anchor.reset(), ours.reset(), "reset")
        rng = np.random.default_rng(2)
        for t in range(STEPS):
            actions = rng.integers(0, 3, NUM_ENVS)
            expected = anchor.step(actions)
            assert_same_results(anchor, ours, expected, ours.step(actions), f"step {t}")
            seen.extend(expected[3])
            ends += int(expected[2].sum())
        for vec_env in (anchor, ours):  # a second reset, seeded again
            vec_env.seed(12)
        assert_same_results(anchor, ours, anchor.reset(), ours.reset(), "second reset")
    finally:
        ours.close()
        anchor.close()
    kinds = kinds_seen(seen)
    # The run covered mixed types under one key, `_` keys, non-str keys, late keys.
    assert {"int", "float", "bool", "float32", "NoneType", "ndarray", "str"} <= kinds["distance"]
    assert {"_raw_reward", 7, ("t", 1), "late", "big", "terminal_observation"} <= set(kinds)
    assert ends >= 20, ends


# Per step (reset first), the info of env 0 and env 1: each kind the rows could
# change when the two envs disagree, as the issue lists them.
SCRIPTS = [
    ({"reset": 1}, {"reset": 2.5}),
    ({"distance": 1}, {"distance": 1.75}),                  # int, float
    ({"flag": True}, {"flag": 2}),                          # bool, int
    ({"v": np.float32(0.5)}, {"v": 0.123456789012345}),     # float32, float
    ({"_raw_reward": 1.5, "r": 1}, {"_raw_reward": -2.0, "r": 2}),  # `_` key
    ({3: "three", "k": 1}, {3: 4, "k": 2}),                 # an int key
    ({"n": 1.0}, {"n": None}),                              # a number, None
    ({"a": np.zeros(2)}, {"a": np.ones(3, np.int16)}),      # ragged arrays
    ({"big": 2 ** 70}, {"big": -(2 ** 64)}),                # beyond int64
    ({"big": 5, "u": np.uint64(2 ** 64 - 1)}, {"big": 2 ** 63, "u": np.uint64(7)}),
    ({"x_position": np.float64(0.25), "x_velocity": np.float64(-1.5),  # MuJoCo's
      "reward_ctrl": np.float32(-0.1)},
     {"x_position": np.float64(1.0), "x_velocity": np.float64(2.0),
      "reward_ctrl": np.float32(-0.2)}),
    ({"x": 1, "_x": 5}, {"x": 2, "_x": 6}),                 # a key and its mask name
    ({"nested": {"a": 1, 2: [np.int8(3)]}, "b": np.bool_(True)},
     {"nested": {"a": 2.0}, "b": False}),
    ({"last": 1.5, "TimeLimit.truncated": "mine"}, {"last": np.float32(2.5)}),  # truncates
]


def _scripted(env: int, reuse: bool) -> ScriptedInfoEnv:
    return ScriptedInfoEnv([step[env] for step in SCRIPTS], reuse=reuse, reuse_obs=reuse)


def test_each_info_kind_comes_back_as_the_env_wrote_it():
    # Ours: env 1 reuses its info dict and observation array; the anchor's do not.
    anchor = DummyVecEnv([functools.partial(_scripted, i, False) for i in range(2)])
    ours = FastSubprocVecEnv([functools.partial(_scripted, i, i == 1) for i in range(2)],
                             start_method="fork", envs_per_worker=1)
    try:
        assert_same_results(anchor, ours, anchor.reset(), ours.reset(), "reset")
        for t in range(2 * len(SCRIPTS)):  # twice through the script, an episode end each
            expected = anchor.step(np.zeros(2, np.int64))
            got = ours.step(np.zeros(2, np.int64))
            assert_same_results(anchor, ours, expected, got, f"step {t + 1}")
            if expected[2].any():
                assert got[3][1]["last"] == np.float32(2.5)
                assert got[3][1]["terminal_observation"].tolist() == [13.0, -13.0]
    finally:
        ours.close()
        anchor.close()


def test_numeric_infos_stay_in_shared_memory():
    # MuJoCo-like infos (Python float, numpy float64 and float32, int) and SB3's
    # "TimeLimit.truncated": no pipe message per step once the layouts are learned
    # (one env per worker: worker i's messages are env i's).
    fns = [functools.partial(NumericInfoEnv, "fixed", 100_000)] * 2
    vec_env = FastSubprocVecEnv(fns, start_method="fork", envs_per_worker=1)
    try:
        vec_env.reset()
        actions = np.zeros((2, 2), np.float32)
        for _ in range(5):
            vec_env.step(actions)
        workers = [psutil.Process(pid) for pid in vec_env.worker_pids()]
        before = [w.io_counters().write_count for w in workers]
        ends = np.zeros(2, np.int64)
        for _ in range(200):
            _, _, dones, infos = vec_env.step(actions)
            ends += dones
        # One message per episode end (the final info and observation), none otherwise.
        assert ends.sum() >= 2
        writes = [w.io_counters().write_count - b for w, b in zip(workers, before)]
        assert writes == ends.tolist()
        assert {type(v).__name__ for v in infos[0].values()} >= {"float", "float64", "float32"}
    finally:
        vec_env.close()


class _NoDictInfoEnv(ScriptedInfoEnv):
    """Returns ``None`` as its step's info."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, None


def test_an_info_that_is_no_dict_is_refused_naming_the_env():
    fns = [functools.partial(ScriptedInfoEnv, [{}] * 5),
           functools.partial(_NoDictInfoEnv, [{}] * 5)]
    vec_env = FastSubprocVecEnv(fns, start_method="fork", envs_per_worker=1)
    try:
        vec_env.reset()
        with pytest.raises(TypeError, match="info of type NoneType; expected a dict") as info:
            vec_env.step(np.zeros(2, np.int64))
        assert "env 1" in " ".join(getattr(info.value, "__notes__", []))
    finally:
        vec_env.close()
