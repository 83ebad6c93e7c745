"""Workers that die and are restarted (``restart_policy``), through every local front end.

Each front end runs ``tests/faults/restart_script.py`` as a child (a training
loop whose simulator dies by SIGKILL, a segfault and ``os._exit(3)`` at seeded
random steps), which checks the values each step returns against an
undisturbed run and the budget; here we check that it finished, logged one
line per restart naming the envs, the cause and the count, printed no crash
dump, and left no process and no ``/dev/shm`` entry behind.
"""

import concurrent.futures
import functools
import logging
import os
import re
from typing import Dict

import gymnasium as gym
import numpy as np
import pytest

from alf_env.control_plane.restart import RestartPolicy
from alf_env.errors import WorkerDiedError
from alf_env.front_ends.alf.create import create_environment
from alf_env.front_ends.alf.fast_parallel_environment import FastParallelEnvironment
from alf_env.front_ends.alf.parallel_environment import ParallelAlfEnvironment
from alf_env.vector import FastVectorEnv
from tests.faults.restart_script import CAUSES, KINDS
from tests.support.child_runs import ChildRun, run_module

CHILD_TIMEOUT = 180.0  # a child still running then hangs: killed, and the test fails

# One child per front end (FastVectorEnv's with its pipe path and asynchronous mode).
CHILDREN = {"vector": ["vector", "vector_pipe", "vector_async"], "sb3": ["sb3"],
            "fast": ["fast"], "parallel": ["parallel"]}
# The envs the victim's worker hosts, per front end.
HOSTED = {"vector": "[2, 3]", "vector_pipe": "[2, 3]", "vector_async": "[2, 3]",
          "sb3": "[2, 3]", "fast": "[2, 3]", "parallel": "[2]"}
# Which runs check the budget (a second death past it raises).
BUDGET_CHECKED = ("vector", "sb3", "fast", "parallel")


@pytest.fixture(scope="module")
def runs() -> Dict[str, ChildRun]:
    """Every front end's script, run side by side."""
    with concurrent.futures.ThreadPoolExecutor(len(CHILDREN)) as pool:
        futures = {child: pool.submit(run_module, "tests.faults.restart_script", front_ends,
                                      CHILD_TIMEOUT)
                   for child, front_ends in CHILDREN.items()}
        return {child: future.result() for child, future in futures.items()}


@pytest.mark.parametrize("child", sorted(CHILDREN))
def test_dead_workers_are_restarted_and_the_run_completes(child, runs):
    run = runs[child]
    assert not run.problems(), f"{run.problems()}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.status == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    lines = run.stdout.splitlines()
    expected = []
    for front_end in CHILDREN[child]:
        expected.append(f"ok {front_end} {','.join(KINDS)} restarted {HOSTED[front_end]}")
        if front_end in BUDGET_CHECKED:
            expected.append("ok budget")
    assert [line.split(" at ")[0] for line in lines[:-1]] == expected, run.stdout
    assert lines[-1] == "done"
    assert "Traceback" not in run.stderr, run.stderr
    assert "Fatal Python error" not in run.stderr, run.stderr  # faulthandler off in the env


@pytest.mark.parametrize("child", sorted(CHILDREN))
def test_each_restart_logs_one_line_with_the_envs_the_cause_and_the_count(child, runs):
    run = runs[child]
    logged = [line for line in run.stderr.splitlines() if "restarting them" in line]
    expected = []
    for front_end in CHILDREN[child]:
        expected += [(HOSTED[front_end], CAUSES[kind], count, len(KINDS))
                     for count, kind in enumerate(KINDS, start=1)]
        if front_end in BUDGET_CHECKED:  # its one restart (the second death raises)
            expected.append((HOSTED[front_end], CAUSES["sigkill"], 1, 1))
    assert len(logged) == len(expected), run.stderr
    for line, (hosted, cause, count, limit) in zip(logged, expected):
        assert f"envs {hosted} (worker " in line, line
        assert cause in line, line
        assert re.search(rf"\(restart {count} of {limit}\)$", line), line


# -- in this process: what a restart refuses, and a rebuild that fails ---------------


class Fragile(gym.Wrapper):
    """CartPole that dies when it removes ``kill``, and whose rebuild,
    once ``rebuild`` exists, fails as that file says: ``raise`` or ``spaces``."""

    def __init__(self, folder: str) -> None:
        self._kill = os.path.join(folder, "kill")
        rebuild = os.path.join(folder, "rebuild")
        how = open(rebuild).read() if os.path.exists(rebuild) else ""
        if how == "raise":
            raise RuntimeError("the simulator did not come up")
        super().__init__(gym.make("CartPole-v1"))
        if how == "spaces":
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)

    def step(self, action):
        self._maybe_die()
        return self.env.step(action)

    def reset(self, **kwargs):
        self._maybe_die()
        return self.env.reset(**kwargs)

    def _maybe_die(self) -> None:
        if os.path.exists(self._kill):
            try:
                os.unlink(self._kill)
            except FileNotFoundError:
                return  # the other worker's env took it: only one dies
            os._exit(3)

    def die(self) -> None:
        os._exit(3)


def fragile_env(folder, **kwargs):
    return FastVectorEnv([functools.partial(Fragile, str(folder))] * 2, num_workers=2,
                         restart_policy=RestartPolicy(max_restarts=3), **kwargs)


@pytest.mark.parametrize("how,cause", [("raise", r"the simulator did not come up"),
                                       ("spaces", r"env [01] was restarted with other spaces")])
def test_a_rebuild_that_fails_counts_and_raises_the_death(tmp_path, caplog, how, cause):
    caplog.set_level(logging.WARNING, logger="absl")
    env = fragile_env(tmp_path)
    try:
        env.reset(seed=0)
        (tmp_path / "rebuild").write_text(how)
        (tmp_path / "kill").touch()  # both workers' first env sees it: one dies
        with pytest.raises(WorkerDiedError, match="exited with code 3") as info:
            env.step(np.zeros(2, np.int64))
        assert re.search(cause, str(info.value.__cause__)), info.value.__cause__
        assert sum("restarting them (restart 1 of 3)" in r.getMessage()
                   for r in caplog.records) == 1  # it counted
        with pytest.raises(WorkerDiedError):  # broken, as without a policy
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("shared_memory", [True, False])
def test_a_death_during_reset_returns_the_restarted_env_flagged(tmp_path, shared_memory):
    env = fragile_env(tmp_path, shared_memory=shared_memory)
    try:
        env.reset(seed=0)
        (tmp_path / "kill").touch()  # the first env to reset sees it and dies
        obs, infos = env.reset(seed=10)
        restarted = infos["_env_restarted"]
        assert restarted.sum() == 1 and infos["env_restarted"][restarted].all()
        survivor = int(np.flatnonzero(~restarted)[0])
        expected, _ = gym.make("CartPole-v1").reset(seed=10 + survivor)
        np.testing.assert_array_equal(obs[survivor], expected)  # its reset, intact
        obs, rewards, terminated, truncated, infos = env.step(np.zeros(2, np.int64))
        assert "env_restarted" not in infos  # then normal steps
    finally:
        env.close()


def test_a_death_during_a_call_raises_as_without_a_policy(tmp_path):
    env = fragile_env(tmp_path)
    try:
        env.reset(seed=0)
        with pytest.raises(WorkerDiedError, match="env 1 died.*exited with code 3"):
            env.call_envs("die", {1: ((), {})})
        with pytest.raises(WorkerDiedError):
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("make", [
    lambda policy: FastVectorEnv([lambda: gym.make("CartPole-v1")], restart_policy=policy),
    lambda policy: ParallelAlfEnvironment([lambda: None], restart_policy=policy),
    lambda policy: FastParallelEnvironment([lambda: None], restart_policy=policy),
])
def test_a_policy_of_another_type_is_refused_before_any_worker_starts(make):
    with pytest.raises(TypeError, match="restart_policy: expected None or a RestartPolicy, "
                                        "got int"):
        make(3)


def test_create_environment_passes_the_policy_on_and_refuses_it_without_workers():
    with pytest.raises(ValueError, match="restart_policy: nonparallel=True"):
        create_environment("CartPole-v1", num_parallel_environments=2, nonparallel=True,
                           restart_policy=RestartPolicy())
    env = create_environment("CartPole-v1", num_parallel_environments=2,
                             restart_policy=RestartPolicy(max_restarts=1))
    try:
        assert env.restart_policy == RestartPolicy(max_restarts=1)
    finally:
        env.close()
