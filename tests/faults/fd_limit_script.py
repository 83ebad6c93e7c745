"""A training script under a low limit on open files (``ulimit -n``).

Run by ``tests/faults/test_fd_limit.py``::

    python -m tests.faults.fd_limit_script FRONT_END LIMIT NUM_WORKERS [unchecked]

It lowers its soft ``RLIMIT_NOFILE`` to ``LIMIT``, then builds a
``FastVectorEnv`` (``vector``) or a ``FastParallelEnvironment`` (``fast``) of
``NUM_WORKERS`` envs, one per worker, steps it and closes it, printing
``started <seconds>`` before the constructor and ``stepped`` after the steps.
An error of the constructor ends the script, as it would a user's.
``unchecked`` turns the up-front count off (as if it had missed descriptors),
so the workers run out of them while they start.
"""

import functools
import resource
import sys
import time

import numpy as np


def main(front_end: str, limit: int, num_workers: int, unchecked: bool) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    if unchecked:
        from alf_env.control_plane import launch as group
        group.FDS_PER_WORKER = group.FDS_PER_FAST_WORKER = group.FDS_TO_SPARE = 0
    print("started", time.monotonic(), flush=True)
    if front_end == "vector":
        import gymnasium as gym

        from alf_env.vector import FastVectorEnv
        env = FastVectorEnv([functools.partial(gym.make, "CartPole-v1")] * num_workers,
                            num_workers=num_workers)
        env.reset(seed=0)
        env.step(np.zeros(num_workers, np.int64))
    else:
        from alf_env.environments import suite_gym
        from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
        env = FastParallelEnvironment(
            [functools.partial(suite_gym.load, "CartPole-v1")] * num_workers,
            num_workers=num_workers)
        env.reset()
        env.step(np.zeros(num_workers, np.int64))
    print("stepped", flush=True)
    env.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "unchecked" in sys.argv[4:])
