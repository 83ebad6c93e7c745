"""A script that ends with its GymProxy still open: the exit hook must close the worker.

Run by ``tests/front_ends/gym/test_proxy.py``::

    python -m tests.front_ends.gym.proxy_exit_script CONTEXT HOW

It makes a frame proxy (start method ``CONTEXT``), steps it, prints the
worker's pid, then ends as ``HOW`` says: "return" (the script's end) or
"raise" (an uncaught exception).
"""

import sys

from alf_env import GymProxy
from tests.front_ends.gym.proxy_envs import FrameEnv


def main(context: str, how: str) -> None:
    proxy = GymProxy(FrameEnv, context=context)
    proxy.reset(seed=0)
    proxy.step(1)
    print(proxy.worker_pid, flush=True)
    if how == "raise":
        raise RuntimeError("the training loop failed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
