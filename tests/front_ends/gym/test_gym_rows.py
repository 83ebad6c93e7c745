"""The job handler of FastVectorEnv's workers (alf_env.front_ends.gym.gym_rows), run
in this process over a shared block: the exact write (one native copy of the
step's observation, reward, flags and info record) writes the same bytes as the
checking write, and takes the common steps."""

import functools
import pickle

import gymnasium as gym
import numpy as np
import pytest

from alf_env.data_plane.shared_block import SharedBlock
from alf_env.front_ends.gym import gym_rows
from alf_env.front_ends.gym.info_codec import InfoEncoder
from alf_env.front_ends.gym.space_layout import SpaceLayout
from tests.support.gym_envs import NumericInfoEnv
from tests.support.timings import check_clock_counts

NUM_ENVS = 3


class _Pipe:
    """The worker's end of the pipe: keeps what the handler sends."""

    def __init__(self):
        self.sent = []

    def send_bytes(self, data):
        self.sent.append(pickle.loads(data))


class _Endless(NumericInfoEnv):
    """Never ends an episode: every step after the first has the step's layout."""

    def step(self, action):
        obs, reward, _, _, info = super().step(action)
        return obs, reward, False, False, info


def _env(pattern, env_id):
    env = _Endless("fixed") if pattern == "endless" else NumericInfoEnv(pattern,
                                                                       episode_length=7)
    env.reset(seed=env_id)
    return env


def _bound(pattern, exact):
    """A handler over NUM_ENVS NumericInfoEnvs; (handler, rows, pipe, block)."""
    probe = NumericInfoEnv("fixed" if pattern == "endless" else pattern)
    obs = SpaceLayout(probe.observation_space, "obs", "observation")
    act = SpaceLayout(probe.action_space, "act", "action")
    block = SharedBlock(gym_rows.block_fields(obs, act, 128), num_rows=NUM_ENVS,
                        num_workers=1)
    group = gym_rows.GymEnvBatch([functools.partial(_env, pattern, i)
                               for i in range(NUM_ENVS)], 0)
    pipe = _Pipe()
    handler = gym_rows.GymRowsHandler((0, NUM_ENVS), obs, act,
                                      gym.vector.AutoresetMode.NEXT_STEP, 128)(
        group, block, pipe, 0)
    if not exact:
        handler._exact_rows = None  # the checking write only
    return handler, gym_rows.EnvRows(block, obs, act), pipe, block


def _row_bytes(rows):
    parts = [view.tobytes() for view in rows.obs]
    parts += [rows.reward.tobytes(), rows.terminated.tobytes(), rows.truncated.tobytes(),
              rows.report.tobytes(), rows.info_layout.tobytes(), rows.info.tobytes()]
    return parts


@pytest.mark.parametrize("pattern", ["fixed", "come_go", "type_change"])
def test_exact_write_gives_the_bytes_and_reports_of_the_checking_write(pattern):
    exact, exact_rows, exact_pipe, block_a = _bound(pattern, exact=True)
    checked, checked_rows, checked_pipe, block_b = _bound(pattern, exact=False)
    actions = np.random.default_rng(0).uniform(-1, 1, (60, NUM_ENVS, 2)).astype(np.float32)
    try:
        for handler in (exact, checked):
            handler.reset(0)
        for step, action in enumerate(actions):
            for handler, rows in ((exact, exact_rows), (checked, checked_rows)):
                rows.act[0][...] = action
                handler.step(0)
            assert _row_bytes(exact_rows) == _row_bytes(checked_rows), step
            assert len(exact_pipe.sent) == len(checked_pipe.sent), step
        for ours, theirs in zip(exact_pipe.sent, checked_pipe.sent):
            assert repr(ours) == repr(theirs)
    finally:
        block_a.close()
        block_b.close()


def test_steps_of_a_known_layout_take_the_exact_write(monkeypatch):
    # The info of "fixed": a Python float, numpy float64 and float32 and a Python
    # int, every step.
    handler, rows, pipe, block = _bound("endless", exact=True)
    encodes = []
    original = InfoEncoder.encode

    def counting(self, *args, **kwargs):
        encodes.append(args[0])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(InfoEncoder, "encode", counting)
    try:
        handler.reset(0)
        encodes.clear()
        rows.act[0][...] = 0.5
        handler.step(0)  # learns the step's layout
        learned = len(encodes)
        assert learned == NUM_ENVS
        for _ in range(30):
            handler.step(0)
        assert len(encodes) == learned  # no env went the checking way
        assert not rows.report.any()
        assert len(pipe.sent) == 2  # the reset's and the first step's new layouts
        np.testing.assert_array_equal(rows.info_layout, [2] * NUM_ENVS)
    finally:
        block.close()


def test_every_env_steps_before_any_row_is_written(monkeypatch):
    handler, rows, pipe, block = _bound("endless", exact=True)
    order = []
    for k, env in enumerate(handler._group.envs):
        def step(action, k=k, step=env.step):
            order.append(("step", k))
            return step(action)
        monkeypatch.setattr(env, "step", step)
    write = handler._write

    def logged_write(k, *args):
        order.append(("write", k))
        return write(k, *args)

    monkeypatch.setattr(handler, "_write", logged_write)
    try:
        handler.reset(0)
        rows.act[0][...] = 0.5
        order.clear()
        handler.step(0)
        assert order == ([("step", k) for k in range(NUM_ENVS)]
                         + [("write", k) for k in range(NUM_ENVS)])
        assert not rows.terminated.any() and rows.reward.all()
    finally:
        block.close()


def test_each_envs_step_is_timed_into_its_groups_clock():
    handler, rows, _, block = _bound("endless", exact=True)
    clock = handler._group.step_clock
    try:
        handler.reset(0)
        for _ in range(7):
            rows.act[0][...] = 0.5
            handler.step(0)
            handler.after_step()  # as the job loop does once the step is reported
        check_clock_counts(clock, 7, NUM_ENVS)
    finally:
        handler._group.close()
        block.close()
