"""Seeded random info dicts, an env that returns them, and a strict comparison.

The info tests of the front ends (tests/front_ends/{gym,sb3,alf}/test_random_infos.py)
build one vector env per test and drive a few hundred random steps through it
next to the anchor (gymnasium's ``SyncVectorEnv``, SB3's ``DummyVecEnv``, the
``env_info`` rule of the ALF contract). :class:`RandomInfoEnv` draws every info
from a generator seeded by ``reset(seed=...)``, so envs built from the same
constructors and reset with the same seeds return the same infos, step for
step, in any process.

What the infos hold (per env and step, drawn at random; see :data:`KINDS`):
Python ints, floats and bools, numpy scalars (float32/float64/int32/uint8/
bool_), fixed-shape and ragged arrays, ``None``, strings, ints beyond int64,
lists, nested dicts; keys that start with ``_`` (``_raw_reward``, and ``x``
with ``_x``), a key that appears only late in a run, an int key and a tuple
key. About half of the infos are *canonical* (every canonical key with its
base kind), so that envs often share one layout (the shared-memory path),
and the rest mix kinds across envs and steps.
"""

import copy
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: Value makers by kind name.
KINDS: Dict[str, Callable[[np.random.Generator], Any]] = {
    "int": lambda rng: int(rng.integers(-1000, 1000)),
    "float": lambda rng: float(rng.normal()),
    "bool": lambda rng: bool(rng.integers(2)),
    "f32": lambda rng: np.float32(rng.normal()),
    "f64": lambda rng: np.float64(rng.normal()),
    "i32": lambda rng: np.int32(rng.integers(-1000, 1000)),
    "u8": lambda rng: np.uint8(rng.integers(256)),
    "npbool": lambda rng: np.bool_(rng.integers(2)),
    "arr_f32": lambda rng: rng.normal(size=3).astype(np.float32),
    "arr_i64": lambda rng: rng.integers(-9, 9, size=(2, 2)),
    "ragged": lambda rng: rng.normal(size=int(rng.integers(1, 5))),
    "none": lambda rng: None,
    "str": lambda rng: f"s{int(rng.integers(100))}",
    "bigint": lambda rng: 2 ** 70 + int(rng.integers(100)),
    "list": lambda rng: [int(rng.integers(9)), float(rng.normal())],
    "nested": lambda rng: {"a": int(rng.integers(9)), "b": np.float32(rng.normal())},
}

#: Per profile: the canonical keys with their base kinds (in the canonical
#: order), the kinds a non-canonical value may take instead, the probability
#: of such a value, and the extra keys with the probability of each.
PROFILES: Dict[str, Dict[str, Any]] = {
    # gymnasium: mostly kinds SyncVectorEnv batches; mixing is rare (it raises on
    # many mixes, which the test then expects from both).
    "gym": {
        "canonical": [("distance", "float"), ("lives", "int"), ("flag", "bool"),
                      ("speed", "f32"), ("pos", "arr_f32"), ("x", "int"), ("_x", "int"),
                      ("_raw_reward", "float"), ("grid", "arr_i64")],
        "extra": [("note", "str"), ("maybe", "none"), ("sub", "nested"), (7, "float"),
                  (("t", 1), "int"), ("trail", "ragged"), ("obj", "list"),
                  ("nb", "npbool"), ("late", "float")],
        "mix": ["int", "float", "bool", "f32", "f64", "none", "str", "nested", "ragged"],
        "p_mix": 0.02,
        "p_extra": 0.1,
    },
    # SB3: anything goes, each env's dict must come back as it was.
    "sb3": {
        "canonical": [("distance", "float"), ("lives", "int"), ("flag", "bool"),
                      ("speed", "f32"), ("x_pos", "f64"), ("pos", "arr_f32"),
                      ("_raw_reward", "float")],
        "extra": [("note", "str"), ("maybe", "none"), ("sub", "nested"), (7, "float"),
                  (("t", 1), "int"), ("trail", "ragged"), ("obj", "list"),
                  ("nb", "npbool"), ("big", "bigint"), ("small", "u8"), ("late", "i32")],
        "mix": list(KINDS),
        "p_mix": 0.3,
        "p_extra": 0.3,
    },
    # ALF env_info: numeric values (kinds mixed among the numeric scalars), None
    # and missing keys (zeros), `_` keys, a late key and a str (ignored), ints
    # beyond int64 (no fixed-size numeric entry: ignored).
    "alf": {
        "canonical": [("distance", "float"), ("lives", "int"), ("flag", "bool"),
                      ("speed", "f32"), ("pos", "arr_f32"), ("_raw_reward", "float"),
                      ("grid", "arr_i64"), ("x", "int"), ("_x", "int")],
        "extra": [("note", "str"), ("late", "float"), ("huge", "bigint"), ("maybe", "none")],
        "mix": ["int", "float", "bool", "f32", "f64", "i32", "u8", "none"],
        "p_mix": 0.3,
        "p_extra": 0.3,
    },
}

#: Keys that an info holds only from this step of the env's run on.
LATE_STEP = 30


def random_info(rng: np.random.Generator, profile: str, step: int) -> Dict[Any, Any]:
    """One random info dict (see the module docstring)."""
    conf = PROFILES[profile]
    info: Dict[Any, Any] = {}
    canonical = rng.random() < 0.5
    for key, kind in conf["canonical"]:
        if not canonical and rng.random() < 0.2:
            continue  # missing
        if not canonical and rng.random() < conf["p_mix"]:
            kind = conf["mix"][int(rng.integers(len(conf["mix"])))]
            if profile == "alf" and key in ("pos", "grid"):
                kind = "none"  # a fixed-shape entry: missing or None, never reshaped
        info[key] = KINDS[kind](rng)
    if not canonical:
        for key, kind in conf["extra"]:
            if key == "late" and step < LATE_STEP:
                continue
            if rng.random() < conf["p_extra"]:
                if rng.random() < conf["p_mix"] and profile != "alf":
                    kind = conf["mix"][int(rng.integers(len(conf["mix"])))]
                info[key] = KINDS[kind](rng)
        if rng.random() < 0.2:  # the keys in another order
            keys = list(info)
            order = rng.permutation(len(keys))
            info = {keys[i]: info[keys[i]] for i in order}
    return info


class RandomInfoEnv(gym.Env):
    """A small env whose infos are :func:`random_info` dicts.

    Observations are float32 ``(2,)`` arrays (a new array each time), actions
    ``Discrete(3)``; episodes end by termination (random) or truncation (a
    length drawn at reset), so every autoreset path runs.

    Args:
        profile: a key of :data:`PROFILES`.
        reuse: return one dict object for every info, cleared and refilled by
            each ``step`` and ``reset`` (as some envs do).
    """

    metadata: Dict[str, Any] = {"render_modes": []}

    def __init__(self, profile: str = "gym", reuse: bool = False) -> None:
        self.profile = profile
        self.reuse = reuse
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self._rng = np.random.default_rng(0)
        self._info: Dict[Any, Any] = {}
        self._t = 0
        self._limit = 10
        self._run_steps = 0

    def _fill(self, info: Dict[Any, Any]) -> Dict[Any, Any]:
        if not self.reuse:
            return info
        self._info.clear()
        self._info.update(info)
        return self._info

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[np.ndarray, Dict[Any, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._run_steps = 0
        self._t = 0
        self._limit = int(self._rng.integers(3, 25))
        obs = np.array([0.0, self._rng.normal()], np.float32)
        return obs, self._fill(random_info(self._rng, self.profile, self._run_steps))

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[Any, Any]]:
        self._t += 1
        self._run_steps += 1
        obs = np.array([self._t, float(action) + self._rng.normal()], np.float32)
        reward = float(self._rng.normal())
        terminated = bool(self._rng.random() < 0.04)
        truncated = self._t >= self._limit
        info = random_info(self._rng, self.profile, self._run_steps)
        return obs, reward, terminated, truncated, self._fill(info)


def make_env(profile: str, reuse: bool) -> RandomInfoEnv:
    """A :class:`RandomInfoEnv` (a picklable constructor with ``functools.partial``)."""
    return RandomInfoEnv(profile, reuse)


def assert_same(expected: Any, actual: Any, path: str = "info") -> None:
    """Asserts ``actual`` is ``expected`` value by value and type by type.

    Dicts: the same keys in the same order; arrays: the same dtype, shape and
    values (object arrays element by element); everything else: the same type
    and an equal value (NaN equals NaN).
    """
    assert type(actual) is type(expected), (
        f"{path}: expected {type(expected).__name__} {expected!r}, got "
        f"{type(actual).__name__} {actual!r}")
    if isinstance(expected, dict):
        assert list(actual) == list(expected), (
            f"{path}: expected keys {list(expected)}, got {list(actual)}")
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: {expected!r} != {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{path}[{i}]")
    elif isinstance(expected, np.ndarray):
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), (
            f"{path}: expected {expected.dtype} {expected.shape} {expected!r}, got "
            f"{actual.dtype} {actual.shape} {actual!r}")
        if expected.dtype == object:
            for i, (e, a) in enumerate(zip(expected.ravel(), actual.ravel())):
                assert_same(e, a, f"{path}[{i}]")
        else:
            assert np.array_equal(expected, actual, equal_nan=expected.dtype.kind in "fc"), (
                f"{path}: expected {expected!r}, got {actual!r}")
    elif isinstance(expected, (float, np.floating)) and math.isnan(expected):
        assert math.isnan(actual), f"{path}: expected nan, got {actual!r}"
    else:
        assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


def kinds_seen(infos: List[Dict[Any, Any]]) -> Dict[Any, set]:
    """The value types each key had (for the tests' coverage checks)."""
    seen: Dict[Any, set] = {}
    for info in infos:
        for key, value in info.items():
            seen.setdefault(key, set()).add(type(value).__name__)
    return seen


class ScriptedInfoEnv(gym.Env):
    """An env that returns given infos: ``script[0]`` from ``reset``, ``script[t]``
    from step ``t`` (the last step truncates, then the script starts again).

    Args:
        script: the info dicts, in order (each returned as a copy).
        reuse: return one dict object, cleared and refilled by each step and reset.
        reuse_obs: return one observation array, overwritten by each step and reset.
    """

    metadata: Dict[str, Any] = {"render_modes": []}

    def __init__(self, script: List[Dict[Any, Any]], reuse: bool = False,
                 reuse_obs: bool = False) -> None:
        self.script = script
        self.reuse = reuse
        self.reuse_obs = reuse_obs
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self._t = 0
        self._info: Dict[Any, Any] = {}
        self._obs = np.zeros(2, np.float32)

    def _result(self) -> Tuple[np.ndarray, Dict[Any, Any]]:
        info = copy.deepcopy(self.script[self._t])
        if self.reuse:
            self._info.clear()
            self._info.update(info)
            info = self._info
        obs = self._obs if self.reuse_obs else np.zeros(2, np.float32)
        obs[:] = (self._t, -self._t)
        return obs, info

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[np.ndarray, Dict[Any, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._result()

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[Any, Any]]:
        self._t += 1
        obs, info = self._result()
        return obs, float(self._t), False, self._t == len(self.script) - 1, info
