"""Fault injection into FastParallelEnvironment (shared memory + native engine).

The ways the parent ends (Ctrl-C, SIGTERM, SIGKILL, no close(), ...) are in
tests/faults/test_endings.py; a SIGALRM interrupting a hung
step in tests/front_ends/alf/test_fast_parallel_environment.py.
"""

import functools
import time

import numpy as np
import pytest

from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from tests.support.alf_envs import CountingEnv
from tests.support.faults import NUM_ENVS, AlfBatchedFrontEnd, BatchedFaultContract, FaultyAlfEnv


class TestFastParallelEnvironmentFaults(BatchedFaultContract):
    frontend = AlfBatchedFrontEnd(FastParallelEnvironment, "fast")


class BigAnswers(FaultyAlfEnv):
    def big(self) -> np.ndarray:
        return np.full(8_000_000, self._env_id, np.uint8)  # far beyond a pipe's buffer


def test_call_answers_larger_than_the_pipe_buffer_do_not_hang():
    ctors = [functools.partial(BigAnswers, env_id=i) for i in range(NUM_ENVS)]
    with FastParallelEnvironment(ctors, timeout=30.0) as env:
        env.reset()
        answers = env.call_envs_with_same_args("big")
        assert [int(a[-1]) for a in answers] == list(range(NUM_ENVS))
        env.step(np.zeros(NUM_ENVS, np.int64))  # still in step


class FailsFirstReset(CountingEnv):
    """Episodes of 2 steps; env 2 (the spare) raises at its first reset, slowly
    (so that its report is still to come when a call is sent to it)."""

    def __init__(self, env_id: int = 0) -> None:
        super().__init__(env_id=env_id, min_length=2, max_length=2)
        self._resets = 0

    def _reset(self):
        self._resets += 1
        if self._env_id == 2 and self._resets == 1:
            time.sleep(0.3)
            raise ValueError("injected failure in the background reset")
        return super()._reset()

    def ping(self) -> int:
        return self._env_id


@pytest.mark.parametrize("cls", [ParallelAlfEnvironment, FastParallelEnvironment])
def test_failed_background_reset_of_a_spare_surfaces_when_it_takes_a_slot(cls):
    # Calls in between must work (on the fast path the spare's job is still
    # unread when the call's doorbell rings); the pipe must stay in step.
    ctors = [functools.partial(FailsFirstReset, env_id=i) for i in range(3)]
    with cls(ctors, num_spare_envs_for_reload=1, timeout=10.0) as env:
        env.reset()
        assert env.call_envs_with_same_args("ping") == [0, 1, 2]
        action = np.zeros(2, np.int64)
        env.step(action)
        assert env.step(action).is_last().all()
        with pytest.raises(ValueError, match="in the background reset") as info:
            env.step(action)  # env 2 takes slot 0 with its failed reset
        assert info.value.__cause__.env_id == 2
        assert env.call_envs_with_same_args("ping") == [0, 1, 2]
