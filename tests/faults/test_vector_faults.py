"""Fault injection into alf_env.vector.FastVectorEnv (gymnasium front end).

The ways the parent ends (Ctrl-C, SIGTERM, SIGKILL, no close(), ...) are in
tests/faults/test_endings.py. More FastVectorEnv faults (async state errors,
terminate, workers that ignore SIGTERM) are in tests/front_ends/gym/test_vector_env.py and
tests/front_ends/gym/test_vector_async.py.
"""

import functools

import numpy as np

from alf_env.vector import FastVectorEnv
from tests.support.faults import NUM_ENVS, BatchedFaultContract, FaultyGymEnv, VectorFrontEnd


class TestFastVectorEnvFaults(BatchedFaultContract):
    frontend = VectorFrontEnd()


class BigAnswers(FaultyGymEnv):
    def big(self) -> np.ndarray:
        return np.full(8_000_000, self.env_id, np.uint8)  # far beyond a pipe's buffer


def test_call_answers_larger_than_the_pipe_buffer_do_not_hang():
    with FastVectorEnv([functools.partial(BigAnswers, env_id=i)
                        for i in range(NUM_ENVS)]) as env:
        env.reset()
        env.call_async("big")
        answers = env.call_wait(timeout=30.0)
        assert [int(a[-1]) for a in answers] == list(range(NUM_ENVS))
