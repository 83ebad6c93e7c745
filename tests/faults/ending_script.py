"""A training script that ends in one of the ways a training script ends.

Run by ``tests/faults/test_endings.py`` and ``benchmarks/exit_times.py``::

    python -m tests.faults.ending_script FRONT_END START_METHOD NUM_ENVS ENDING

It is what people write: a stepping loop, no ``with``, no ``close()``. On
stdout it prints ``pids <worker pids>`` once the workers step (``starting``
before they are created), ``t <time.monotonic()>`` right before it ends by
itself (``end``, ``del``, ``raise``, ``exit``) or before ``close()``
(``closing``), and, from an exit hook that runs after every other one,
``left <pids>``: its children still there (running or zombie) when it exits.
The caller sends the signal of the other endings (see ``ENDINGS``).
"""

import atexit
import functools
import inspect
import os
import signal
import sys
import time
from typing import Any, Iterator, List, Tuple

import numpy as np

FRONT_ENDS = ("process", "parallel", "fast", "vector", "vector_async")
# Also run (by tests/front_ends/gym/test_pipe_path.py, not in the endings
# table): FastVectorEnv's pipe path, with workers that are not daemonic.
PIPE_FRONT_END = "vector_pipe"

# ending -> (what the script does, the phase in which the caller signals it).
ENDINGS = {
    "end": "the script ends after a few steps, without close()",
    "del": "`del env` after a few steps, then the script ends",
    "raise": "an exception escapes the stepping loop",
    "exit": "sys.exit(3) in the stepping loop",
    "sigint_step": "SIGINT to the parent while it steps",
    "sigint_group_step": "SIGINT to the process group while the parent steps",
    "sigint_wait": "SIGINT to the parent while it waits for slow steps",
    "sigint_group_wait": "SIGINT to the process group while the parent waits",
    "sigint_start": "SIGINT to the parent while the workers start",
    "sigint_group_start": "SIGINT to the process group while the workers start",
    "sigint_close": "SIGINT to the parent during a slow close()",
    "sigint_group_close": "SIGINT to the process group during a slow close()",
    "sigterm": "SIGTERM to the parent while it steps",
    "sigterm_own_handler": "SIGTERM to a parent that installed its own SIGTERM handler "
                           "(it exits with status 7)",
    "sigkill": "SIGKILL to the parent while it steps",
}

STEPS_BEFORE_ENDING = 20
STEP_DELAY = 0.5    # seconds per step in the *_wait endings
CTOR_DELAY = 0.4    # seconds per env constructor in the *_start endings ...
CTOR_DELAY_PARALLEL = 2.0  # ... for FastVectorEnv, which starts its workers at once
CLOSE_DELAY = 1.5   # seconds per env close() in the *_close endings

_TRAINER = None  # the "end" ending keeps its env here until the interpreter exits


def _delays(front_end: str, ending: str) -> dict:
    ctor_delay = CTOR_DELAY_PARALLEL if front_end.startswith("vector") else CTOR_DELAY
    return {"step_delay": STEP_DELAY if ending.endswith("_wait") else 0.0,
            "ctor_delay": ctor_delay if ending.endswith("_start") else 0.0,
            "close_delay": CLOSE_DELAY if ending.endswith("_close") else 0.0}


def _make_alf_env(env_id: int = 0, step_delay: float = 0.0, ctor_delay: float = 0.0,
                  close_delay: float = 0.0) -> Any:
    from tests.support.alf_envs import CountingEnv

    class SlowCountingEnv(CountingEnv):
        def _step(self, action):
            time.sleep(step_delay)
            return super()._step(action)

        def _close(self):
            time.sleep(close_delay)

    time.sleep(ctor_delay)
    return SlowCountingEnv(env_id=env_id, min_length=1000, max_length=1000)


def _make_gym_env(step_delay: float = 0.0, ctor_delay: float = 0.0,
                  close_delay: float = 0.0) -> Any:
    import gymnasium as gym

    class SlowGymEnv(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(3, np.float32), {}

        def step(self, action):
            time.sleep(step_delay)
            return np.zeros(3, np.float32), 1.0, False, False, {}

        def close(self):
            time.sleep(close_delay)

    time.sleep(ctor_delay)
    return SlowGymEnv()


class _Trainer:
    """One front end behind ``pids() / step() / close()``."""

    def __init__(self, front_end: str, start_method: str, num_envs: int,
                 ending: str) -> None:
        delays = _delays(front_end, ending)
        self.front_end = front_end
        _say("starting")
        if front_end == "process":
            from alf_env.environments.process_environment import ProcessEnvironment
            self.env = [ProcessEnvironment(functools.partial(_make_alf_env, **delays),
                                           env_id=i, start_method=start_method)
                        for i in range(num_envs)]
            for env in self.env:
                env.start()
                env.reset()
        elif front_end in ("parallel", "fast"):
            import torch
            if front_end == "parallel":
                from alf_env.environments.parallel_environment import ParallelAlfEnvironment as cls
            else:
                from alf_env.environments.fast_parallel_environment import (
                    FastParallelEnvironment as cls,
                )
            kwargs = {}
            if "num_workers" in inspect.signature(cls).parameters:
                kwargs["num_workers"] = num_envs  # one process per env, as for the others
            self.env = cls([functools.partial(_make_alf_env, **delays)] * num_envs,
                           start_method=start_method, **kwargs)
            self.env.reset()
            self.action = torch.zeros(num_envs, dtype=torch.int64)
        else:
            from alf_env.vector import FastVectorEnv
            batch_size = num_envs // 2 if front_end == "vector_async" else None
            pipe = front_end == PIPE_FRONT_END
            self.env = FastVectorEnv([functools.partial(_make_gym_env, **delays)] * num_envs,
                                     context=start_method, batch_size=batch_size,
                                     envs_per_worker=1, shared_memory=not pipe,
                                     daemon=not pipe)
            if batch_size is None:
                self.env.reset()
                self.action = np.zeros(num_envs, np.int64)
            else:
                self.env.async_reset()
                self.action = np.zeros(batch_size, np.int64)

    def pids(self) -> List[int]:
        if self.front_end == "process":
            return [env.pid for env in self.env]
        return list(self.env.worker_pids())

    def step(self) -> None:
        if self.front_end == "process":
            promises = [env.step(np.int64(1), blocking=False) for env in self.env]
            for promise in promises:
                promise()
        elif self.front_end in ("vector", PIPE_FRONT_END):
            self.env.step_async(self.action)
            self.env.step_wait()
        elif self.front_end == "vector_async":
            _, _, _, _, info = self.env.recv()
            self.env.send(self.action, info["env_id"])
        else:
            self.env.step(self.action)

    def close(self) -> None:
        if self.front_end == "process":
            from alf_env.environments.process_environment import close_all
            close_all(self.env)
        else:
            self.env.close()


# multiprocessing's helper processes end by themselves once this process is gone.
_HELPERS = (b"multiprocessing.forkserver", b"multiprocessing.resource_tracker")


def processes() -> Iterator[Tuple[int, List[str]]]:
    """``(pid, fields)`` of every process, ``fields`` being ``/proc/<pid>/stat``
    after the command name: ``fields[0]`` is the state (``Z``: a zombie),
    ``fields[1]`` the parent pid, ``fields[3]`` the session id."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                yield int(name), f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile


def _report_leftovers() -> None:
    """Prints this process's children still there (running or zombie), but
    multiprocessing's own helpers."""
    children = []
    for pid, fields in processes():
        if int(fields[1]) != os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if not any(h in cmdline for h in _HELPERS):
            children.append(f"{pid}:{fields[0]}")  # pid:state (Z for a zombie)
    _say("left", *children)


def _own_sigterm_handler(signum: int, frame: Any) -> None:
    _say("own handler")
    sys.exit(7)


def _say(*words: Any) -> None:
    print(*words, flush=True)


def main(front_end: str, start_method: str, num_envs: int, ending: str) -> None:
    # Ctrl-C as in a terminal, also when the tests were started where SIGINT is
    # ignored (a background job, nohup): Python leaves an inherited SIG_IGN be.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Registered first, so it runs last: after alf_env's and multiprocessing's hooks.
    atexit.register(_report_leftovers)
    if ending == "sigterm_own_handler":
        signal.signal(signal.SIGTERM, _own_sigterm_handler)
    _import(front_end)  # before "starting": the caller times the start from there
    trainer = _Trainer(front_end, start_method, num_envs, ending)
    _say("pids", *trainer.pids())
    if ending.endswith("_close"):
        trainer.step()
        _say("t", time.monotonic())
        trainer.close()
        return
    steps = 0
    while True:
        trainer.step()
        steps += 1
        if steps == STEPS_BEFORE_ENDING and ending in ("end", "del", "raise", "exit"):
            _say("t", time.monotonic())
            if ending == "raise":
                raise RuntimeError("the trainer failed")
            if ending == "exit":
                sys.exit(3)
            if ending == "del":
                del trainer
            else:
                global _TRAINER
                _TRAINER = trainer
            return


def _import(front_end: str) -> None:
    if front_end.startswith("vector"):
        import alf_env.vector
    else:
        import alf_env.environments.fast_parallel_environment  # noqa: F401
        import tests.support.alf_envs  # noqa: F401


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
