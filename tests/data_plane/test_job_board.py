"""JobBoard.run, seen through a FastVectorEnv's board: the step hook's place in a step."""

import gymnasium as gym
import numpy as np

from alf_env.vector import FastVectorEnv


def test_the_step_hook_runs_before_the_steps_jobs_are_posted():
    # The hook releases torch's OpenMP pool: made after the post, while the
    # workers hold the CPUs, it cost a HalfCheetah loop with a policy 13-17%
    # of its cycle (docs/benchmarks.md, "What decides these figures").
    env = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2)
    try:
        env.reset(seed=0)
        board = env._board
        seen = []
        board.step_hook = lambda: seen.append([board.outstanding(w) for w in range(2)])
        for _ in range(3):
            env.step(np.zeros(4, np.int64))
        assert seen == [[False, False]] * 3
    finally:
        env.close()
