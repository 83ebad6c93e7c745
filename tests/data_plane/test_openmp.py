"""alf_env.data_plane.openmp: parking the trainer's OpenMP pool for a step puts its
spinning threads to sleep, keeps them for the next forward pass, and always ends."""

import functools
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf_env.data_plane.openmp import OpenMpPark, loaded_openmp_runtime
from alf_env.vector import FastVectorEnv
from tests.support.paths import REPO_ROOT


def test_the_runtime_is_found_in_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n")
    assert loaded_openmp_runtime(str(maps)) is None
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /opt/torch/lib/libgomp-a34b3233.so.1\n")
    assert loaded_openmp_runtime(str(maps)) == "/opt/torch/lib/libgomp-a34b3233.so.1"


def test_parking_does_nothing_until_enabled():
    park = OpenMpPark()
    assert park.available  # torch is imported
    assert park.begin() is None and not park.parked
    park.set(True)
    end = park.begin()
    assert park.parked
    end()
    assert not park.parked
    park.set(False)
    assert park.begin() is None


# A fresh process, so that the pool's threads are the ones torch's first op makes; its
# idle threads spin for ever (GOMP_SPINCOUNT), so only parking puts them to sleep.
SLEEPS_WHILE_PARKED = textwrap.dedent("""
    import os, time
    import torch
    from alf_env.data_plane.openmp import OpenMpPark

    def threads():
        return set(os.listdir("/proc/self/task"))

    def state(tid):
        with open(f"/proc/self/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    torch.set_num_threads(2)
    before = threads()
    x = torch.randn(512, 512)
    x @ x
    pool = threads() - before
    assert pool, "torch started no OpenMP thread"
    park = OpenMpPark()
    park.set(True)
    assert park.available
    for _ in range(3):
        x @ x  # the pool spins after the op...
        assert all(state(t) == "R" for t in pool), [state(t) for t in pool]
        end = park.begin()
        deadline = time.monotonic() + 10
        while any(state(t) != "S" for t in pool):  # ...and sleeps once parked
            assert time.monotonic() < deadline, [state(t) for t in pool]
            time.sleep(0.001)
        end()
    x @ x
    assert threads() - before == pool, "the pool's threads were replaced"
    print("parked and kept", len(pool))
""")


def test_a_parked_pool_sleeps_and_is_kept_for_the_next_op():
    env = dict(os.environ, OMP_WAIT_POLICY="ACTIVE", GOMP_SPINCOUNT="infinite")
    out = subprocess.run([sys.executable, "-c", SLEEPS_WHILE_PARKED], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("parked and kept")


class Raising(gym.Wrapper):
    def step(self, action):
        raise ValueError("boom in step")


def spy_on(env: FastVectorEnv, park: OpenMpPark, seen: list) -> None:
    """Makes ``env``'s lockstep steps park the pool; ``seen`` gets whether each was parked."""
    def begin():
        end = park.begin()

        def ended():
            seen.append(park.parked)
            end()
        return ended
    env._board.step_hook = begin


def test_the_board_parks_the_pool_for_each_step_and_the_steps_are_unchanged():
    fns = [functools.partial(gym.make, "CartPole-v1")] * 4
    parked_env, plain_env = FastVectorEnv(fns), FastVectorEnv(fns)
    park, seen = OpenMpPark(), []
    park.set(True)
    assert park.available
    try:
        spy_on(parked_env, park, seen)
        plain_env._board.step_hook = None
        policy = torch.nn.Linear(4, 2)
        obs = [e.reset(seed=3)[0] for e in (parked_env, plain_env)]
        for _ in range(50):
            with torch.no_grad():
                actions = [policy(torch.as_tensor(o)).argmax(1).numpy() for o in obs]
            results = [e.step(a) for e, a in zip((parked_env, plain_env), actions)]
            for a, b in zip(*results[:2]):
                if isinstance(a, dict):
                    assert a.keys() == b.keys()
                else:
                    np.testing.assert_array_equal(a, b)
            obs = [r[0] for r in results]
        assert len(seen) >= 50 and all(seen) and not park.parked
    finally:
        parked_env.close()
        plain_env.close()


def test_a_step_that_raises_still_unparks():
    env = FastVectorEnv([lambda: Raising(gym.make("CartPole-v1"))] * 2)
    park, seen = OpenMpPark(), []
    park.set(True)
    assert park.available
    try:
        env.reset(seed=0)
        spy_on(env, park, seen)
        with pytest.raises(ValueError, match="boom in step"):
            env.step(np.zeros(2, np.int64))
        assert seen == [True] and not park.parked
    finally:
        env.close()
