"""FastVectorEnv's infos through shared memory (alf_env.front_ends.gym.info_codec) and the
spreading of envs over workers (num_workers): value for value what gymnasium's
SyncVectorEnv returns, and no pipe message per step for numeric infos."""

import copy
import functools

import numpy as np
import psutil
import pytest
from gymnasium.vector import AutoresetMode

from alf_env.control_plane.affinity import usable_cpu_count
from alf_env.front_ends.gym import info_codec as vector_infos
from alf_env.front_ends.gym.info_codec import InfoDecoder, InfoEncoder, add_info
from alf_env.front_ends.gym.info_layout import PIPE, InfoLayout, signature_of
from alf_env.vector import FastVectorEnv, plan_workers
from tests.support.gym_envs import InfoEnv, NumericInfoEnv, assert_tree_equal
from tests.support.gym_runs import Trajectories, stepped_alone
from tests.support.gym_runs import run_both as vector_run_both

MODES = list(AutoresetMode)
PATTERNS = ["fixed", "come_go", "type_change"]


def assert_same_info(got, expected, path="info"):
    """Like assert_tree_equal, and scalars (also inside object arrays) of the same
    type, dict keys in the same order."""
    assert_tree_equal(got, expected, path)
    if isinstance(expected, dict):
        assert list(got) == list(expected), (path, list(got), list(expected))
        for key in expected:
            assert_same_info(got[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        for i, (x, y) in enumerate(zip(got, expected)):
            assert_same_info(x, y, f"{path}[{i}]")
    elif isinstance(expected, np.ndarray) and expected.dtype == object:
        for i, (x, y) in enumerate(zip(got, expected)):
            assert type(x) is type(y), (f"{path}[{i}]", type(x), type(y))


def run_both(env_fns, steps, seed=0, **kwargs):
    """tests.front_ends.gym.test_vector_env.run_both, with infos compared type for type."""
    return vector_run_both(env_fns, steps, seed=seed, action_seed=seed,
                           check=assert_same_info, **kwargs)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_infos_match_sync_vector_env(pattern, mode):
    fns = [functools.partial(NumericInfoEnv, pattern)] * 4
    ends = run_both(fns, 120, seed=3, autoreset_mode=mode)
    assert ends >= 4 or pattern == "type_change"  # whose episodes never end


@pytest.mark.parametrize("kwargs", [dict(envs_per_worker=1), dict(num_workers=3),
                                    dict(num_workers=1), dict(info_bytes=0),
                                    dict(info_bytes=16)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_infos_match_sync_vector_env_for_every_layout_of_workers_and_area(kwargs):
    # info_bytes=16: the 4-key step info (28 bytes) does not fit: it goes on the pipe.
    for pattern in ("fixed", "type_change"):
        fns = [functools.partial(NumericInfoEnv, pattern)] * 4
        ends = run_both(fns, 80, seed=1, **kwargs)
        assert ends >= 4 or pattern == "type_change"


def test_mixed_infos_of_every_kind_match_sync_vector_env():
    # InfoEnv: nested dicts, str, empty infos, arrays, numpy scalars, in 3 uneven workers.
    fns = [functools.partial(InfoEnv, i) for i in range(5)]
    assert run_both(fns, 150, seed=4, num_workers=3) >= 10


def worker_writes(env, steps):
    """The write syscalls the workers make during ``steps`` steps (pipe messages)."""
    workers = [psutil.Process(pid) for pid in env.worker_pids()]
    before = [w.io_counters().write_count for w in workers]
    for _ in range(steps):
        env.step(env.action_space.sample())
    return [w.io_counters().write_count - b for w, b in zip(workers, before)]


@pytest.mark.parametrize("envs_per_worker", [1, 2])
def test_numeric_infos_cost_no_pipe_message_per_step(envs_per_worker):
    fns = [functools.partial(NumericInfoEnv, "fixed")] * 4
    with FastVectorEnv(fns, envs_per_worker=envs_per_worker) as env:
        env.reset(seed=0)
        env.action_space.seed(0)
        worker_writes(env, 30)  # layouts of the step and reset infos are learned
        assert worker_writes(env, 200) == [0] * env.num_workers  # episodes end meanwhile
    with FastVectorEnv(fns, envs_per_worker=envs_per_worker, info_bytes=0) as env:
        env.reset(seed=0)
        env.action_space.seed(0)
        assert all(w >= 100 for w in worker_writes(env, 100))


def test_declared_info_layout_costs_nothing_from_the_first_step():
    fns = [functools.partial(NumericInfoEnv, "fixed")] * 2
    step_info = {"x_position": 0.0, "x_velocity": np.float64(0), "reward_ctrl":
                 np.float32(0), "frame": 0}
    reset_info = {"x_position": 0.0, "episode_seed": 0}
    with FastVectorEnv(fns, envs_per_worker=1, info_bytes=0,
                       info_example=[step_info, reset_info]) as env:
        assert env.info_bytes >= 28  # grown to fit the declared layouts
        env.reset(seed=0)
        env.action_space.seed(0)
        assert worker_writes(env, 60) == [0, 0]


def test_info_example_must_be_dicts():
    with pytest.raises(TypeError, match=r"info_example\[1\]: expected an info dict, got list"):
        FastVectorEnv([lambda: NumericInfoEnv()], info_example=[{"a": 1}, [1]])
    with pytest.raises(ValueError, match="info_bytes: expected a size in bytes >= 0"):
        FastVectorEnv([lambda: NumericInfoEnv()], info_bytes=-1)


# Not "type_change": a recv batches envs that are not in step, and gymnasium
# itself cannot batch an int and a str under one key.
@pytest.mark.parametrize("pattern", ["fixed", "come_go"])
def test_asynchronous_mode_infos_match_each_env_stepped_alone(pattern):
    n, batch, seed = 4, 2, 9
    fn = functools.partial(NumericInfoEnv, pattern)
    with FastVectorEnv([fn] * n, batch_size=batch) as env:
        log = Trajectories(n, env.single_action_space, seed=seed)
        obs, infos = env.reset(seed=seed)
        log.record((obs, np.zeros(batch), np.zeros(batch, bool), np.zeros(batch, bool),
                    infos))
        result = (obs, infos)
        for _ in range(60):
            ids = result[-1]["env_id"]
            env.send(log.next_actions(ids.tolist()), ids)
            result = env.recv()
            log.record(result)
    for i in range(n):
        expected = stepped_alone(fn, seed + i, log.actions[i][:len(log.results[i]) - 1])
        assert len(expected) == len(log.results[i])
        for t, (got, want) in enumerate(zip(log.results[i], expected)):
            assert_tree_equal(got, want, f"env {i} result {t}")


# -- the codec on its own -------------------------------------------------------------


def test_signature_kinds():
    sig = signature_of({"f": 1.0, "i": 2, "b": True, "n32": np.float32(1), "a": np.zeros(
        (2, 3), np.int16), "s": "x", "none": None, "d": {"x": 1}, "final_obs": np.zeros(2),
        "nb": np.bool_(True), 3: 1.0, "obj": np.array([None])})
    kinds = dict(sig)
    assert kinds["f"] == (float, "<f8", ()) and kinds["i"] == (int, "<i8", ())
    assert kinds["b"] == (bool, "|b1", ()) and kinds["n32"] == (np.float32, "<f4", ())
    assert kinds["a"] == (np.ndarray, "<i2", (2, 3))
    for key in ("s", "none", "d", "final_obs", "nb", 3, "obj"):
        assert kinds[key] == PIPE, key
    assert [key for key, _ in sig][:3] == ["f", "i", "b"]  # the dict's order


def make_codec(capacity=64, rows=2):
    area = np.zeros((rows, capacity), np.uint8)
    lids = np.zeros(rows, np.int32)
    encoder = InfoEncoder(capacity, rows)
    decoder = InfoDecoder(area, lids, np.zeros(rows, np.int64), 1)
    return area, lids, encoder, decoder


def encode_rows(area, lids, encoder, decoder, infos):
    """Encodes one info per row; returns the payloads (layouts registered)."""
    payloads, new = {}, []
    for row, info in enumerate(infos):
        lids[row], payload = encoder.encode(row, info, area, row, new)
        if payload is not None:
            payloads[row] = payload
    for lid, sig in new:
        decoder.register(0, lid, sig)
    return payloads


def batch_of(infos):
    expected = {}
    for i, info in enumerate(infos):
        add_info(expected, info, i, len(infos))
    return expected


def test_codec_round_trip_is_exact_and_learns_each_layout_once():
    area, lids, encoder, decoder = make_codec()
    infos = [{"a": 1.5, "n": np.int32(3), "s": "text", "arr": np.arange(3, dtype=np.uint8)},
             {"a": 2.5, "n": np.int32(4), "s": "more", "arr": np.arange(3, dtype=np.uint8)}]
    payloads = encode_rows(area, lids, encoder, decoder, infos)
    assert payloads == {0: ["text"], 1: ["more"]} and lids.tolist() == [1, 1]
    assert_same_info(decoder.batch(slice(0, 2), [0, 1], payloads), batch_of(infos))
    new = []  # the same keys and types again: nothing new to send
    assert encoder.encode(0, dict(infos[1]), area, 0, new) == (1, ["more"]) and new == []


def test_codec_pure_layout_batch_is_the_fast_path_with_gymnasium_dtypes():
    area, lids, encoder, decoder = make_codec()
    infos = [{"x": 1.0, "k": 7, "ok": True}, {"x": -2.0, "k": 8, "ok": False}]
    payloads = encode_rows(area, lids, encoder, decoder, infos)
    assert payloads == {}
    got = decoder.batch(np.array([1, 0]), [1, 0], {})
    assert_same_info(got, batch_of(infos[::-1]))
    assert got["x"].dtype == np.float64 and got["k"].dtype == np.int64
    assert got["ok"].dtype == np.bool_ and got["x"].flags.c_contiguous


def test_codec_shared_layout_batch_gives_independent_contiguous_arrays_each_step():
    area, lids, encoder, decoder = make_codec(rows=3)
    infos = [{"x": float(i), "y": np.float64(i / 2), "k": i, "v": np.full(2, i, np.int16)}
             for i in range(3)]
    assert encode_rows(area, lids, encoder, decoder, infos) == {}
    first = decoder.batch(slice(0, 3), [0, 1, 2], {})
    assert_same_info(first, batch_of(infos))
    assert list(first) == list(batch_of(infos))  # gymnasium's key order, masks after keys
    for value in first.values():
        assert value.flags.c_contiguous and value.flags.writeable
    first["x"][0] = 99.0  # a caller's write stays in that array
    first["_x"][1] = False
    assert first["y"][0] == 0.0 and first["_y"][1]
    # The next step gets new arrays (the first step's are the caller's to keep).
    later = [dict(info, x=info["x"] + 10) for info in infos]
    encode_rows(area, lids, encoder, decoder, later)
    second = decoder.batch(slice(0, 3), [0, 1, 2], {})
    assert_same_info(second, batch_of(later))
    assert first["x"][0] == 99.0 and first["_x"][1] == False  # noqa: E712
    # A row whose env has no info any more: the cached decision is not reused.
    lids[2] = 0
    assert_same_info(decoder.batch(slice(0, 3), [0, 1, 2], {}), batch_of(later[:2] + [{}]))
    lids[:] = 0
    assert decoder.batch(slice(0, 3), [0, 1, 2], {}) == {}


@pytest.mark.parametrize("rows", [slice(0, 3), np.array([2, 0, 1])], ids=["slice", "index"])
def test_codec_batch_of_one_type_of_numbers_gives_new_arrays_and_masks_each_step(rows):
    # MuJoCo's kind of info: float keys only, one group read in one copy.
    area, lids, encoder, decoder = make_codec(rows=3)
    infos = [{"x_position": float(i), "x_velocity": np.float64(-i), "reward_run": 0.5 * i}
             for i in range(3)]
    assert encode_rows(area, lids, encoder, decoder, infos) == {}
    (_, _, fields, view), = decoder._groups[1]
    assert view is not None and [key for key, _ in fields] == list(infos[0])
    order = list(range(3)) if isinstance(rows, slice) else rows.tolist()
    first = decoder.batch(rows, order, {})
    assert_same_info(first, batch_of([infos[i] for i in order]))
    assert list(first) == list(batch_of(infos))
    first["_x_velocity"][:] = False  # a caller's writes stay in its arrays
    first["x_position"][0] = 99.0
    second = decoder.batch(rows, order, {})
    assert_same_info(second, batch_of([infos[i] for i in order]))
    assert not first["_x_velocity"].any() and first["x_position"][0] == 99.0
    # Another batch size: masks of its own length.
    assert_same_info(decoder.batch(slice(0, 2), [0, 1], {}), batch_of(infos[:2]))


@pytest.mark.parametrize("rows", [slice(0, 3), np.array([2, 0, 1])], ids=["slice", "index"])
def test_codec_shared_layout_batch_reads_back_to_back_and_scattered_keys_alike(rows):
    # "x" and "y" are float64 fields with an int64 between them (scattered);
    # "p", "q" and "r" are three int16 (2,) arrays back to back (one copy).
    area, lids, encoder, decoder = make_codec(capacity=128, rows=3)
    infos = [{"x": float(i), "k": i, "y": np.float64(-i), "p": np.full(2, i, np.int16),
              "q": np.full(2, 10 + i, np.int16), "r": np.full(2, 20 + i, np.int16)}
             for i in range(3)]
    assert encode_rows(area, lids, encoder, decoder, infos) == {}
    views = {tuple(key for key, _ in fields): view is not None
             for _, _, fields, view in decoder._groups[1]}
    assert views == {("x", "y"): False, ("k",): True, ("p", "q", "r"): True}
    order = list(range(3)) if isinstance(rows, slice) else rows.tolist()
    got = decoder.batch(rows, order, {})
    assert_same_info(got, batch_of([infos[i] for i in order]))
    for value in got.values():
        assert value.flags.c_contiguous and value.flags.writeable


def test_codec_layout_of_scalars_changes_with_a_value_type():
    area, lids, encoder, decoder = make_codec()
    new = []
    assert encoder.encode(0, {"a": 1.0, "b": 2}, area, 0, new)[0] == 1
    assert encoder.encode(0, {"a": 1.0, "b": 3}, area, 0, new)[0] == 1
    assert encoder.encode(0, {"a": np.float32(1.0), "b": 3}, area, 0, new)[0] == 2
    assert encoder.encode(0, {"a": 1.0, "b": True}, area, 0, new)[0] == 3
    assert [lid for lid, _ in new] == [1, 2, 3]


def test_codec_remembers_only_shared_layouts():
    # Mixed rows take the slow path and are not remembered: their combinations
    # could grow without bound over a long run. Rows without infos need no memory.
    area, lids, encoder, decoder = make_codec(rows=2)
    infos = [{"x": 1.0}, {"k": 2}]
    encode_rows(area, lids, encoder, decoder, infos)
    assert_same_info(decoder.batch(slice(0, 2), [0, 1], {}), batch_of(infos))
    assert decoder._whole_batch == {}
    shared = [{"x": 1.0}, {"x": 3.0}]
    encode_rows(area, lids, encoder, decoder, shared)
    assert_same_info(decoder.batch(slice(0, 2), [0, 1], {}), batch_of(shared))
    lids[:] = 0
    assert decoder.batch(slice(0, 2), [0, 1], {}) == {}
    assert sorted(decoder._whole_batch.values()) == [1]


def test_codec_sends_what_does_not_fit_on_the_pipe():
    area, lids, encoder, decoder = make_codec(capacity=16)
    big = {"a": np.zeros(3)}  # 24 bytes > 16
    huge = {"i": 2 ** 70}     # beyond int64
    new = []
    assert encoder.encode(0, big, area, 0, new) == (0, big) and new == []
    lid, payload = encoder.encode(0, {"i": 1}, area, 0, new)
    assert lid == 1 and payload is None
    assert encoder.encode(0, huge, area, 0, new) == (0, huge)
    assert encoder.encode(0, {}, area, 0, new) == (0, None)


def test_codec_stops_learning_after_max_layouts(monkeypatch):
    monkeypatch.setattr(vector_infos, "MAX_LAYOUTS", 3)
    area, lids, encoder, decoder = make_codec()
    new = []
    results = [encoder.encode(0, {f"k{i}": i}, area, 0, new) for i in range(5)]
    assert [lid for lid, _ in results] == [1, 2, 3, 0, 0]
    assert results[4][1] == {"k4": 4}


def test_layout_aligns_fields():
    layout = InfoLayout(signature_of({"b": True, "d": 1.0, "c": np.int16(1)}), 64)
    offsets = {name: layout.dtype.fields[name][1] for _, _, name, _ in layout.shm}
    assert offsets == {"f0": 0, "f1": 8, "f2": 16} and layout.nbytes == 18


# -- envs spread over workers ---------------------------------------------------------


def test_plan_workers_spreads_envs_evenly_and_checks_arguments():
    assert plan_workers(10, 10, 4, None) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert plan_workers(6, 6, None, 2) == [(0, 2), (2, 4), (4, 6)]
    assert plan_workers(8, 4, None, None) == [(i, i + 1) for i in range(8)]  # async
    cpus = usable_cpu_count()
    assert len(plan_workers(64, 64, None, None)) == min(64, cpus)
    assert len(plan_workers(1, 1, None, None)) == 1
    with pytest.raises(ValueError, match=r"num_workers: expected 1 <= num_workers <= 4"):
        plan_workers(4, 4, 5, None)
    with pytest.raises(ValueError, match=r"envs_per_worker: expected a divisor .* got 3"):
        plan_workers(4, 4, None, 3)
    with pytest.raises(ValueError, match="num_workers must divide the number of envs"):
        plan_workers(6, 3, 4, None)
    with pytest.raises(ValueError, match="batch_size must be a multiple of envs_per_worker=2"):
        plan_workers(6, 3, 3, None)
    with pytest.raises(ValueError, match="do not make 6 envs"):
        plan_workers(6, 6, 2, 2)


def test_default_is_one_worker_per_usable_cpu():
    n = usable_cpu_count() * 2 + 1
    with FastVectorEnv([lambda: NumericInfoEnv()] * n) as env:
        assert env.num_workers == min(n, usable_cpu_count())
        assert len(set(env.worker_pids())) == env.num_workers
        assert env.envs_per_worker is None or env.envs_per_worker * env.num_workers == n
        obs, _ = env.reset(seed=0)
        assert obs.shape == (n, 4)


@pytest.mark.parametrize("kwargs", [dict(), dict(batch_size=2, envs_per_worker=2),
                                    dict(batch_size=1)],
                         ids=["one_env", "async_one_worker_of_2", "async_batch_of_1"])
def test_returned_infos_and_values_are_not_overwritten_by_the_next_step(kwargs):
    # A batch of one row (or one worker's back-to-back rows) is read through a
    # slice of the shared rows: what a step returned must be the caller's own.
    num_envs = 1 if not kwargs else 4
    env = FastVectorEnv([functools.partial(NumericInfoEnv, "fixed")] * num_envs, **kwargs)
    try:
        env.reset(seed=0)
        first = env.step(env.action_space.sample())
        saved = copy.deepcopy(first)
        for _ in range(3):
            env.step(env.action_space.sample())
        assert_same_info(first, saved)
        returned = list(first[:4]) + [v for v in first[4].values() if isinstance(v, np.ndarray)]
        shared = list(env._block.views.values())
        assert not any(np.shares_memory(a, b) for a in returned for b in shared)
    finally:
        env.close()
