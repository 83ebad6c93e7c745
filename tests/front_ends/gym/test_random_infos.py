"""FastVectorEnv's infos against gymnasium's SyncVectorEnv: random info dicts per env
and step (tests/support/random_infos.py), every path, both autoreset modes that
report the finished step, value by value and type by type.

One vector env per test, a few hundred steps through it. Where SyncVectorEnv
raises (gymnasium's batching refuses some mixes of kinds, e.g. ragged arrays
or None in an int array), FastVectorEnv must raise the same exception type;
both are then reset with the next seed.
"""

import functools
from typing import Any, Tuple

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from alf_env.vector import FastVectorEnv
from tests.support.random_infos import ScriptedInfoEnv, assert_same, make_env

NUM_ENVS = 3
STEPS = 300

PATHS = {
    "shared_memory": {},
    "info_bytes=0": {"info_bytes": 0},
    "pipe": {"shared_memory": False},
}


def both(anchor: Any, ours: Any, method: str, *args: Any, **kwargs: Any
         ) -> Tuple[Any, Any, Any]:
    """Calls ``method(*args, **kwargs)`` of both; ``(exception type or None, anchor's
    result, ours)``, asserting the same exception type from both, or none."""
    results, errors = [], []
    for vec_env in (anchor, ours):
        try:
            results.append(getattr(vec_env, method)(*args, **kwargs))
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 -- compared below
            results.append(None)
            errors.append(exc)
    assert type(errors[0]) is type(errors[1]), (
        f"SyncVectorEnv raised {errors[0]!r}, FastVectorEnv {errors[1]!r}")
    return type(errors[0]) if errors[0] is not None else None, results[0], results[1]


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP],
                         ids=lambda m: m.value)
@pytest.mark.parametrize("path", list(PATHS))
def test_random_infos_match_sync_vector_env(path, mode):
    # Env 1 reuses one info dict, cleared and refilled by each step and reset.
    fns = [functools.partial(make_env, "gym", i == 1) for i in range(NUM_ENVS)]
    anchor = SyncVectorEnv(fns, autoreset_mode=mode)
    ours = FastVectorEnv(fns, autoreset_mode=mode, num_workers=2, **PATHS[path])
    seed = 0
    errors = x_masks = reused_final_infos = 0
    try:
        assert ours.shared_memory is (path != "pipe")

        def reset() -> None:
            nonlocal seed, errors
            while True:
                seed += 1
                error, expected, got = both(anchor, ours, "reset", seed=seed)
                if error is None:
                    assert_same(expected, got, f"reset(seed={seed})")
                    return
                errors += 1

        reset()
        rng = np.random.default_rng(1)
        for t in range(STEPS):
            actions = rng.integers(0, 3, NUM_ENVS)
            error, expected, got = both(anchor, ours, "step", actions)
            if error is not None:
                errors += 1
                reset()
                continue
            assert_same(expected, got, f"step {t}")
            infos = expected[4]
            if "x" in infos and infos["_x"].dtype == np.bool_ and infos["_x"].all():
                x_masks += 1  # every env had x and _x: _x is gymnasium's mask
            final = infos.get("final_info", {})
            if final and final.get("_distance", np.zeros(NUM_ENVS, bool))[1]:
                reused_final_infos += 1
    finally:
        ours.close()
        anchor.close()
    # The run covered what it is for, and most steps compared results.
    assert errors < STEPS // 5, errors
    assert x_masks >= 5, x_masks
    if mode is AutoresetMode.SAME_STEP:
        assert reused_final_infos >= 3, reused_final_infos


# Per step (reset first), the infos of the three envs: a key with its mask name
# (``x`` and ``_x``) in one layout for all envs, and other keys; the last step
# truncates.
SCRIPTS = [
    ({"x": 1, "_x": 5}, {"x": 2, "_x": 6}, {"x": 3, "_x": 7}),
    ({"x": 1, "_x": 5}, {"x": 2, "_x": 6}, {"x": 3, "_x": 7}),
    ({"_x": 5, "x": 1}, {"_x": 6, "x": 2}, {"_x": 7, "x": 3}),
    ({"x": 1.5, "_x": 5}, {"x": 2.5}, {"_x": 7}),
    ({"_raw_reward": 1.0, "a": np.float32(1)}, {"_raw_reward": 2.0, "a": np.float32(2)},
     {"_raw_reward": 3.0, "a": np.float32(3)}),
    ({"last": 1, "x": 1, "_x": 5}, {"last": 2, "x": 2, "_x": 6}, {"last": 3, "x": 3, "_x": 7}),
]


def _scripted(env: int, reuse: bool) -> ScriptedInfoEnv:
    return ScriptedInfoEnv([step[env] for step in SCRIPTS], reuse=reuse, reuse_obs=reuse)


@pytest.mark.parametrize("path", list(PATHS))
def test_mask_named_keys_and_reused_infos_match_sync_vector_env(path):
    # Ours: envs 1 and 2 reuse their info dict and observation array, overwritten
    # by reset(); SAME_STEP's final_info and final_obs are the finished step's.
    # The anchor's envs return new ones (SyncVectorEnv keeps a reference to the
    # final observation, which a reused array would overwrite).
    mode = AutoresetMode.SAME_STEP
    anchor = SyncVectorEnv([functools.partial(_scripted, i, False) for i in range(3)],
                           autoreset_mode=mode)
    ours = FastVectorEnv([functools.partial(_scripted, i, i > 0) for i in range(3)],
                         autoreset_mode=mode, num_workers=2, **PATHS[path])
    try:
        assert_same(anchor.reset(seed=0), ours.reset(seed=0), "reset")
        for t in range(2 * (len(SCRIPTS) - 1)):  # two episodes
            expected = anchor.step(np.zeros(3, np.int64))
            assert_same(expected, ours.step(np.zeros(3, np.int64)), f"step {t + 1}")
        # The last step ended the episodes; its reset infos have x before _x: the mask.
        assert expected[4]["final_info"]["last"].tolist() == [1, 2, 3]
        assert expected[4]["_x"].tolist() == [True] * 3
    finally:
        ours.close()
        anchor.close()
