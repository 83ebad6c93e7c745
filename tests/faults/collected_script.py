"""A script that drops envs without closing them, as evaluation loops do.

Run by ``tests/faults/test_collected.py``::

    python -m tests.faults.collected_script FRONT_END

1. It makes an env whose envs take 30 s to close, steps it and drops it
   (``del env``) with the cyclic garbage collector off, so reference counting
   alone must free it; it times the ``del`` and polls until the env's workers
   are gone (reaped).
2. It makes ``LOOP`` small envs in a loop, one worker each, stepping each once
   and never closing one: each replaces the last in the loop variable.
3. It ends with the last env still referenced (the exit hook closes it).

It prints one JSON line: ``collected`` (the dropped env object was freed by
``del``), ``del_seconds``, ``dropped_pids``, ``gone_after`` (seconds until
they were all gone, ``null`` if not within ``WAIT``), ``loop_pids`` (every
worker the loop started), ``alive_after_loop`` (the workers alive after it),
``last_pids`` (the last env's).
"""

import functools
import gc
import json
import sys
import time
import weakref
from typing import Any, List

import gymnasium as gym
import numpy as np
import psutil

FRONT_ENDS = ("process", "parallel", "fast", "vector", "sb3")
LOOP = 100
WAIT = 10.0         # seconds to wait for the dropped env's workers
SLOW_CLOSE = 30.0   # seconds each env of the dropped env takes to close

# multiprocessing's own helper processes, not workers.
_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


class SlowClose(gym.Wrapper):
    """CartPole whose ``close()`` takes ``SLOW_CLOSE`` s: collection must not wait for it."""

    def close(self) -> None:
        time.sleep(SLOW_CLOSE)
        super().close()


def cartpole(slow_close: bool = False) -> gym.Env:
    env = gym.make("CartPole-v1")
    return SlowClose(env) if slow_close else env


def alf_cartpole(slow_close: bool = False, env_id: int = 0) -> Any:
    from alf_env.environments.suite_gym import load
    return load("CartPole-v1", env_id=env_id,
                gym_env_wrappers=(SlowClose,) if slow_close else ())


def make(front_end: str, slow_close: bool = False) -> Any:
    """A small env of ``front_end`` with one worker process, stepped once."""
    if front_end == "process":
        from alf_env.environments.process_environment import ProcessEnvironment
        env = ProcessEnvironment(functools.partial(alf_cartpole, slow_close), env_id=0)
        env.start()
        env.reset()
    elif front_end in ("parallel", "fast"):
        import torch

        from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
        from alf_env.environments.parallel_environment import ParallelAlfEnvironment
        ctor = functools.partial(alf_cartpole, slow_close)
        if front_end == "parallel":
            env = ParallelAlfEnvironment([ctor])
        else:
            env = FastParallelEnvironment([ctor] * 2, num_workers=1)
        env.reset()
        env.step(torch.zeros(env.batch_size, dtype=torch.int64))
    elif front_end == "vector":
        from alf_env.vector import FastVectorEnv
        env = FastVectorEnv([functools.partial(cartpole, slow_close)] * 2, num_workers=1)
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
    else:
        from alf_env.sb3 import FastSubprocVecEnv
        env = FastSubprocVecEnv([functools.partial(cartpole, slow_close)] * 2, "fork",
                                num_workers=1)
        env.reset()
        env.step(np.zeros(2, np.int64))
    return env


def workers() -> List[int]:
    """This process's children (running or zombie), but multiprocessing's helpers."""
    pids = []
    for child in psutil.Process().children():
        try:
            if not any(h in " ".join(child.cmdline()) for h in _HELPERS):
                pids.append(child.pid)
        except psutil.NoSuchProcess:  # reaped meanwhile
            continue
    return pids


def main(front_end: str) -> None:
    report = {}
    env = make(front_end, slow_close=True)
    dropped = workers()
    ref = weakref.ref(env)
    gc.disable()
    begin = time.monotonic()
    del env
    report["del_seconds"] = time.monotonic() - begin
    report["collected"] = ref() is None
    gc.enable()
    while set(dropped) & set(workers()) and time.monotonic() - begin < WAIT:
        time.sleep(0.005)
    report["dropped_pids"] = dropped
    report["gone_after"] = (None if set(dropped) & set(workers())
                            else time.monotonic() - begin)

    loop_pids: set = set()
    for _ in range(LOOP):
        env = make(front_end)
        loop_pids.update(workers())
    report["loop_pids"] = sorted(loop_pids)
    report["alive_after_loop"] = sorted(workers())
    report["last_pids"] = sorted(env.worker_pids() if front_end != "process" else [env.pid])
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
