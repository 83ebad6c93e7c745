"""Requests far larger than a pipe's buffer, through one front end.

Run by ``tests/faults/test_large_requests.py``::

    python -m tests.faults.large_request_script FRONT_END MB [MB ...]

For each size it sends a payload of that many megabytes to every env in each
way the front end has (``set_attr``, ``env_method``/``call`` arguments, reset
options, requests sent before the answers of earlier ones are read), gets back
a checksum of what each env received, or the payload itself (a large answer),
and checks it against the payload sent. It prints ``ok <way> <MB>`` for each
check; a wrong checksum raises ``AssertionError``, and a hang is the caller's
timeout.
"""

import functools
import sys
import zlib
from typing import Any, Callable, Dict, List, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.support.alf_envs import CountingEnv

NUM_ENVS = 2


def payload(mb: float, salt: int) -> np.ndarray:
    """``mb`` megabytes of bytes that differ with ``salt``."""
    rng = np.random.default_rng(salt)
    return np.frombuffer(rng.bytes(int(mb * 1_000_000)), np.uint8)


def checksum(data: np.ndarray) -> int:
    return zlib.crc32(data)


class _Holder:
    """What the envs of every front end do with a payload."""

    payload = np.zeros(0, np.uint8)

    def store(self, data: np.ndarray) -> int:
        self.payload = data
        return checksum(data)

    def checksum(self) -> int:
        return checksum(self.payload)

    def payload_back(self) -> np.ndarray:
        return self.payload


class PayloadGymEnv(_Holder, gym.Env):
    """A gymnasium env that keeps a payload (from ``set_attr``, a call or reset options)."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options and "payload" in options:
            self.payload = options["payload"]
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


class PayloadAlfEnv(_Holder, CountingEnv):
    """An ALF env that keeps a payload (from a call)."""


def report(way: str, mb: float, got: Sequence[int], data: np.ndarray) -> None:
    expected = [checksum(data)] * len(got)
    assert list(got) == expected, f"{way} of {mb} MB: checksums {got}, expected {expected}"
    print("ok", way, mb, flush=True)


def run_process(sizes: List[float]) -> None:
    from alf_env.environments.process_environment import ProcessEnvironment
    env = ProcessEnvironment(PayloadAlfEnv, env_id=0)
    env.start()
    try:
        for mb in sizes:
            a, b = payload(mb, 1), payload(mb, 2)
            report("call", mb, [env.call("store", a)()], a)
            # A large answer not read yet while a large request is written.
            answer = env.call("payload_back")
            stored = env.call("store", b)
            report("pipelined call", mb, [stored()], b)
            report("pipelined answer", mb, [checksum(answer())], a)
    finally:
        env.close()


def run_alf(cls_name: str, sizes: List[float]) -> None:
    from alf_env.environments import fast_parallel_environment, parallel_environment
    cls = (fast_parallel_environment.FastParallelEnvironment if cls_name == "fast"
           else parallel_environment.ParallelAlfEnvironment)
    kwargs: Dict[str, Any] = {"num_workers": NUM_ENVS} if cls_name == "fast" else {}
    env = cls([functools.partial(PayloadAlfEnv, env_id=i) for i in range(NUM_ENVS)],
              **kwargs)
    try:
        env.reset()
        for mb in sizes:
            a, b = payload(mb, 1), payload(mb, 2)
            report("call", mb, env.call_envs_with_same_args("store", a), a)
            # A large answer not read yet when the next request's doorbell rings.
            answer = env.envs[0].call("payload_back")
            stored = env.envs[0].call("store", b)
            report("pipelined call", mb, [stored()], b)
            report("pipelined answer", mb, [checksum(answer())], a)
            env.step(np.zeros(NUM_ENVS, np.int64))  # still in step
    finally:
        env.close()


def run_vector(sizes: List[float]) -> None:
    from alf_env.vector import FastVectorEnv
    env = FastVectorEnv([PayloadGymEnv] * NUM_ENVS, num_workers=NUM_ENVS)
    try:
        env.reset(seed=0)
        for mb in sizes:
            a, b, c = payload(mb, 1), payload(mb, 2), payload(mb, 3)
            env.set_attr("payload", [a] * NUM_ENVS)
            report("set_attr", mb, env.call("checksum"), a)
            report("call", mb, env.call("store", b), b)
            env.reset(options={"payload": c})
            report("reset options", mb, env.call("checksum"), c)
            report("get_attr answer", mb, [checksum(p) for p in env.get_attr("payload")], c)
            env.step(np.zeros(NUM_ENVS, np.int64))  # still in step
    finally:
        env.close()


def run_sb3(sizes: List[float]) -> None:
    from alf_env.sb3 import FastSubprocVecEnv
    env = FastSubprocVecEnv([PayloadGymEnv] * NUM_ENVS, start_method="fork",
                            num_workers=NUM_ENVS)
    try:
        env.reset()
        for mb in sizes:
            a, b = payload(mb, 1), payload(mb, 2)
            env.set_attr("payload", a)
            report("set_attr", mb, env.env_method("checksum"), a)
            report("env_method", mb, env.env_method("store", b), b)
            report("get_attr answer", mb, [checksum(p) for p in env.get_attr("payload")], b)
            env.step(np.zeros(NUM_ENVS, np.int64))  # still in step
    finally:
        env.close()


RUNS: Dict[str, Callable[[List[float]], None]] = {
    "process": run_process,
    "parallel": functools.partial(run_alf, "parallel"),
    "fast": functools.partial(run_alf, "fast"),
    "vector": run_vector,
    "sb3": run_sb3,
}


if __name__ == "__main__":
    RUNS[sys.argv[1]]([float(mb) for mb in sys.argv[2:]])
    print("done", flush=True)
