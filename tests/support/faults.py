"""The fault-injection contract shared by the four front ends' suites.

Every test module of this package binds the contract classes below to one
front end through a :class:`FrontEnd` adapter, so each fault is tested the
same way everywhere:

* :class:`FaultContract` (every front end): a worker exception and a worker
  death at each phase (constructor, reset, step, call, close), a worker killed
  from outside (busy or idle), a hung worker (timeouts, bounded close), bad
  actions, observations that do not match the spec, and a short long run.
* :class:`BatchedFaultContract`: what only batches of envs have (a failure
  while the others still start; the other envs stay usable).
* The parent's endings (its script ends without ``close()``, raises, gets
  Ctrl-C, SIGTERM or SIGKILL, ...) are ``tests/faults/test_endings.py``, one
  table for every front end and start method.

Timing bounds: the 1 s crash bound is the contract, measured from the moment
of death (the env writes ``time.monotonic()`` into a stamp file right before
it dies, or the test notes when it sends the kill). Everything else is
generous, as the machine is shared and noisy.
"""

import contextlib
import faulthandler
import functools
import importlib.util
import logging
import multiprocessing
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from gymnasium import spaces

from alf_env.control_plane import shutdown
from alf_env.environments.alf_wrappers import BatchEnvironmentWrapper
from alf_env.environments.process_environment import ProcessEnvironment
from alf_env.errors import EnvironmentProcessError, EnvTimeoutError, WorkerDiedError
from alf_env.vector import FastVectorEnv
from tests.support.alf_envs import CountingEnv
from tests.support.paths import REPO_ROOT
from tests.support.probe_envs import UnpicklableError, inject
from tests.support.signals import alarm

PHASES = ("ctor", "reset", "step", "call", "close")
RUN_PHASES = ("reset", "step", "call")
EXCEPTIONS = ("raise", "raise_unpicklable")
DEATHS = {"sigkill": r"killed by SIGKILL \(signal 9\)",
          "segv": r"killed by SIGSEGV \(signal 11\)",
          "exit": r"exited with code 3"}
BAD_ACTIONS = ("wrong_shape", "wrong_batch_size", "wrong_structure", "unsafe_dtype")
BAD_OBSERVATIONS = ("obs_shape", "obs_dtype")

VICTIM = 1           # the env that fails
NUM_ENVS = 3
CRASH_BOUND = 1.0    # the contract: WorkerDiedError within 1 s of the death
WAIT_TIMEOUT = 0.5   # the timeout given to waits on a hung worker
SLACK = 2.0          # generous extra time for anything that is not the contract
SHORT_POLITE = 0.5   # CLOSE_POLITE_TIMEOUT while testing bounded closes
LONG_RUN_ENV_STEPS = 20_000
LONG_RUN_NUM_ENVS = 8


# -- faults -------------------------------------------------------------------------


class Fault(NamedTuple):
    """What goes wrong, where, and in which env.

    Attributes:
        kind: a ``tests.support.probe_envs.inject`` fault ("raise", "raise_unpicklable",
            "exit", "sigkill", "segv", "hang"), or a bad observation:
            "obs_shape" (wrong shape), "obs_dtype" (a dtype that does not
            convert), "obs_float64" (one that converts).
        phase: "ctor", "reset", "step", "call" (the env's ``fail()``) or "close".
        env_id: the env that fails (the others never do).
        stamp: a file that gets ``time.monotonic()`` right before the fault.
    """
    kind: str
    phase: str
    env_id: int = VICTIM
    stamp: str = ""


def fire(fault: Fault) -> None:
    """Makes the fault happen in this process (stamping the moment first)."""
    if fault.stamp:
        with open(fault.stamp, "w") as f:
            f.write(repr(time.monotonic()))
    if fault.kind == "segv":
        faulthandler.disable()  # no crash dump in the test output
    inject(fault.kind)


def died_at(stamp: Path) -> float:
    """When the env stamped its death (``time.monotonic()``, same clock here)."""
    return float(stamp.read_text())


class _Injector:
    """Fires ``fault`` once, at its phase, in the env it names."""

    def __init__(self, fault: Optional[Fault], env_id: int) -> None:
        self.fault = fault if fault is not None and fault.env_id == env_id else None
        self.bad_obs = ""  # a pending bad observation kind

    def at(self, phase: str) -> None:
        fault = self.fault
        if fault is None or fault.phase != phase:
            return
        self.fault = None  # once: after an exception the env works again
        if fault.kind.startswith("obs_"):
            self.bad_obs = fault.kind
        else:
            fire(fault)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        kind, self.bad_obs = self.bad_obs, ""
        if kind == "obs_shape":
            return np.zeros(obs.shape[0] + 1, obs.dtype)
        if kind == "obs_dtype":
            return obs.astype(np.complex64)
        if kind == "obs_float64":
            return obs.astype(np.float64)
        return obs


class FaultyAlfEnv(CountingEnv):
    """A ``CountingEnv`` with long episodes that fails once as ``fault`` says.

    Its observation is ``(env_id, step in episode, episode, last action)``,
    so ``obs[1]`` counts the steps it took.
    """

    def __init__(self, env_id: int = 0, fault: Optional[Fault] = None,
                 ctor_delay: float = 0.0, step_delay: float = 0.0) -> None:
        super().__init__(env_id=env_id, min_length=1000, max_length=1000)
        self._injector = _Injector(fault, env_id)
        self._step_delay = step_delay
        time.sleep(ctor_delay)
        self._injector.at("ctor")

    def _reset(self):
        self._injector.at("reset")
        return super()._reset()

    def _step(self, action):
        time.sleep(self._step_delay)
        self._injector.at("step")
        return super()._step(action)

    def _obs(self, action):
        return self._injector.observation(super()._obs(action))

    def ping(self) -> int:
        return self._env_id

    def fail(self) -> int:
        self._injector.at("call")
        return self._env_id

    def _close(self) -> None:
        self._injector.at("close")


class FaultyGymEnv(gym.Env):
    """A gymnasium env that fails once as ``fault`` says.

    Its observation is ``(env_id, steps taken, action[0], *action[1])``, so it
    shows exactly what action it received.
    """

    def __init__(self, env_id: int = 0, fault: Optional[Fault] = None,
                 ctor_delay: float = 0.0, step_delay: float = 0.0) -> None:
        self.env_id = env_id
        self._step_delay = step_delay
        self.observation_space = spaces.Box(-np.inf, np.inf, (5,), np.float32)
        self.action_space = spaces.Tuple((spaces.Discrete(4),
                                          spaces.Box(-1.0, 1.0, (2,), np.float32)))
        self._injector = _Injector(fault, env_id)
        self._t = 0
        time.sleep(ctor_delay)
        self._injector.at("ctor")

    def _obs(self, kind: Any, box: Any) -> np.ndarray:
        obs = np.array([self.env_id, self._t, kind, box[0], box[1]], np.float32)
        return self._injector.observation(obs)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._injector.at("reset")
        self._t = 0
        return self._obs(0, (0.0, 0.0)), {}

    def step(self, action):
        time.sleep(self._step_delay)
        self._injector.at("step")
        self._t += 1
        kind, box = action
        return self._obs(kind, box), 0.0, False, False, {}

    def ping(self) -> int:
        return self.env_id

    def fail(self) -> int:
        self._injector.at("call")
        return self.env_id

    def close(self) -> None:
        self._injector.at("close")


def good_gym_action(n: int = NUM_ENVS) -> Tuple[np.ndarray, np.ndarray]:
    return (np.arange(n) % 4, np.full((n, 2), 0.5, np.float32))


# -- front ends ---------------------------------------------------------------------


class FrontEnd:
    """One front end, reduced to what the contract needs.

    ``reset``/``step`` return the observations as a numpy array of
    ``(rows, obs size)``; ``call`` returns one value per env.
    """

    name = ""
    rows = NUM_ENVS            # rows of a batch (of the bad-input env for PE)
    long_run_backend = ""      # the backend of benchmarks/long_run.py

    def make(self, fault: Optional[Fault] = None, **kwargs: Any) -> Any:
        """An env of ``NUM_ENVS`` envs (one for PE), ``fault`` injected.

        Batched front ends also take ``ctor_delays`` / ``step_delays`` (env
        id -> seconds) and ``parallel_start``; other keyword arguments go to
        the front end's constructor.
        """
        raise NotImplementedError

    def make_with_timeout(self, fault: Fault, timeout: float) -> Any:
        """An env whose waits can time out (front ends that take ``timeout`` per wait)."""
        return self.make(fault)

    def make_for_bad_input(self) -> Any:
        return self.make()

    def pids(self, env: Any) -> List[int]:
        return list(env.worker_pids())

    def victim_pid(self, env: Any) -> int:
        return self.pids(env)[VICTIM]

    def close(self, env: Any) -> None:
        env.close()

    def reset(self, env: Any, timeout: Optional[float] = None) -> np.ndarray:
        raise NotImplementedError

    def step(self, env: Any, action: Any = None,
             timeout: Optional[float] = None) -> np.ndarray:
        raise NotImplementedError

    def call(self, env: Any, name: str, timeout: Optional[float] = None) -> List[Any]:
        raise NotImplementedError

    def prepare(self, env: Any, phase: str) -> None:
        """Brings the env where ``phase`` can be run (reset before step/call)."""
        if phase != "reset":
            self.reset(env)

    def run(self, env: Any, phase: str, timeout: Optional[float] = None) -> Any:
        if phase == "reset":
            return self.reset(env, timeout)
        if phase == "step":
            return self.step(env, None, timeout)
        if phase == "call":
            return self.call(env, "fail", timeout)
        raise AssertionError(phase)

    def env_ids(self) -> List[int]:
        """What ``call("ping")`` returns."""
        return list(range(NUM_ENVS))

    def after_timeout(self, env: Any, phase: str) -> None:
        """Asserts what the front end documents after a wait (of ``phase``) timed out."""

    # bad input: overridden per action kind
    def good_action(self) -> Any:
        raise NotImplementedError

    def bad_actions(self) -> Dict[str, Tuple[Any, str]]:
        raise NotImplementedError

    def accepted_actions(self) -> List[Tuple[Any, np.ndarray]]:
        """Actions that must be accepted (non-contiguous, safe casts), with what
        the envs must receive."""
        raise NotImplementedError

    def out_of_bounds_action(self) -> Tuple[Any, np.ndarray]:
        raise NotImplementedError

    def received(self, obs: np.ndarray) -> np.ndarray:
        """The actions the envs recorded in their observations."""
        raise NotImplementedError

    bad_observation_errors: Dict[str, str] = {}


def _env_fns(cls: type, fault: Optional[Fault], ctor_delays: Optional[Dict[int, float]],
             step_delays: Optional[Dict[int, float]]) -> List[Callable[..., Any]]:
    ctor_delays, step_delays = ctor_delays or {}, step_delays or {}
    return [functools.partial(cls, env_id=i, fault=fault, ctor_delay=ctor_delays.get(i, 0.0),
                              step_delay=step_delays.get(i, 0.0)) for i in range(NUM_ENVS)]


_ALF_BAD_OBSERVATIONS = {
    "obs_shape": rf"env {VICTIM} returned time_step\.observation of shape \(5,\) and "
                 r"dtype float32; its spec expects shape \(4,\) and dtype float32",
    "obs_dtype": rf"env {VICTIM} returned time_step\.observation of dtype complex64, "
                 r"which does not convert to the spec's float32",
}


class _AlfActions:
    """Batched ALF actions for CountingEnv's int64 scalar spec in [0, 3]."""

    rows = NUM_ENVS

    def good_action(self) -> np.ndarray:
        return np.arange(1, self.rows + 1) % 4

    def bad_actions(self) -> Dict[str, Tuple[Any, str]]:
        n = self.rows
        return {
            "wrong_shape": (np.zeros((n, 1), np.int64),
                            rf"action: expected shape \({n},\) .*and dtype int64, "
                            rf"got shape \({n}, 1\)"),
            "wrong_batch_size": (np.zeros(n + 1, np.int64),
                                 rf"action: expected shape \({n},\) \(batch size {n} "),
            "wrong_structure": ((np.zeros(n, np.int64),), "action: its nest structure"),
            "unsafe_dtype": (np.zeros(n, np.float32),
                             "action: expected dtype int64 .*got float32"),
        }

    def accepted_actions(self) -> List[Tuple[Any, np.ndarray]]:
        wide = np.array([[1, 9], [2, 9], [3, 9]], np.int32)[:, 0]  # strided, int32
        assert not wide.flags.c_contiguous
        return [(wide, np.array([1, 2, 3])),
                (torch.tensor([[3, 9], [2, 9], [1, 9]])[:, 0], np.array([3, 2, 1])),
                (np.array([0, 1, 2], np.uint8), np.array([0, 1, 2]))]

    def out_of_bounds_action(self) -> Tuple[Any, np.ndarray]:
        action = np.array([7, -5, 1000], np.int64)  # the spec is [0, 3]
        return action, action

    def received(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, 3].astype(np.int64)


class AlfBatchedFrontEnd(_AlfActions, FrontEnd):
    """``ParallelAlfEnvironment`` or ``FastParallelEnvironment``."""

    bad_observation_errors = _ALF_BAD_OBSERVATIONS

    def __init__(self, cls: type, long_run_backend: str) -> None:
        self.cls = cls
        self.name = cls.__name__
        self.long_run_backend = long_run_backend

    def make(self, fault=None, ctor_delays=None, step_delays=None, parallel_start=False,
             **kwargs):
        fns = _env_fns(FaultyAlfEnv, fault, ctor_delays, step_delays)
        if self.cls.__name__ == "FastParallelEnvironment":
            # One env per worker: the contract names the exact env of each fault
            # (workers of several envs: tests/front_ends/alf/test_env_group.py).
            kwargs.setdefault("num_workers", len(fns))
        return self.cls(fns, start_serially=not parallel_start, **kwargs)

    def make_with_timeout(self, fault, timeout):
        return self.make(fault, timeout=timeout)

    def reset(self, env, timeout=None):
        return env.reset().observation.numpy()

    def step(self, env, action=None, timeout=None):
        if action is None:
            action = self.good_action()
        return env.step(action).observation.numpy()

    def call(self, env, name, timeout=None):
        return env.call_envs_with_same_args(name)

    def after_timeout(self, env, phase):
        # Its envs are out of step: only close() is left.
        with pytest.raises(EnvironmentProcessError, match="unusable: an earlier wait "
                                                          "timed out"):
            self.step(env)


class ProcessFrontEnd(_AlfActions, FrontEnd):
    """One ``ProcessEnvironment`` (env id 1); bad input goes to a batched env in it."""

    name = "ProcessEnvironment"
    long_run_backend = "process"
    bad_observation_errors = _ALF_BAD_OBSERVATIONS

    def make(self, fault=None, constructor=None, **kwargs):
        ctor = constructor or functools.partial(FaultyAlfEnv, fault=fault)
        env = ProcessEnvironment(ctor, env_id=VICTIM, **kwargs)
        env.start()  # on failure it closes itself
        return env

    def make_for_bad_input(self):
        return self.make(constructor=_batched_faulty_alf_env)

    def pids(self, env):
        return [env.pid]

    def victim_pid(self, env):
        return env.pid

    def reset(self, env, timeout=None):
        return _rows(env.reset(blocking=False)(timeout).observation)

    def step(self, env, action=None, timeout=None):
        if action is None:
            action = np.int64(1)
        return _rows(env.step(action, blocking=False)(timeout).observation)

    def call(self, env, name, timeout=None):
        return [env.call(name)(timeout)]

    def env_ids(self):
        return [VICTIM]

    def after_timeout(self, env, phase):
        # The promise stays pending; nothing else is lost.
        with pytest.raises(EnvTimeoutError):
            env.call("ping")(timeout=0.05)


def _batched_faulty_alf_env(env_id: Optional[int] = None) -> BatchEnvironmentWrapper:
    return BatchEnvironmentWrapper([FaultyAlfEnv(env_id=i) for i in range(NUM_ENVS)])


def _rows(obs: Any) -> np.ndarray:
    obs = np.asarray(obs)
    return obs[None] if obs.ndim == 1 else obs


class VectorFrontEnd(FrontEnd):
    """``alf_env.vector.FastVectorEnv`` (one env per worker)."""

    name = "FastVectorEnv"
    long_run_backend = "vector"
    bad_observation_errors = {
        "obs_shape": rf"env {VICTIM} returned an observation that does not fit its "
                     r"observation space .*expected shape \(5,\) and dtype float32, got "
                     r"shape \(6,\)",
        "obs_dtype": rf"env {VICTIM} returned an observation that does not fit its "
                     r"observation space .*got shape \(5,\) and dtype complex64",
    }

    def make(self, fault=None, ctor_delays=None, step_delays=None, parallel_start=True,
             **kwargs):
        # FastVectorEnv always starts its workers side by side. One env per
        # worker: the contract names the exact env of each fault (a worker of
        # several envs is tested in tests/front_ends/gym/test_vector_env.py).
        kwargs.setdefault("envs_per_worker", 1)
        return FastVectorEnv(_env_fns(FaultyGymEnv, fault, ctor_delays, step_delays),
                             **kwargs)

    def reset(self, env, timeout=None):
        env.reset_async()
        return env.reset_wait(timeout=timeout)[0]

    def step(self, env, action=None, timeout=None):
        env.step_async(good_gym_action() if action is None else action)
        return env.step_wait(timeout=timeout)[0]

    def call(self, env, name, timeout=None):
        env.call_async(name)
        return list(env.call_wait(timeout=timeout))

    def after_timeout(self, env, phase):
        # gymnasium-style: the call stays pending and can be waited for again.
        wait = {"step": env.step_wait, "reset": env.reset_wait, "call": env.call_wait}[phase]
        with pytest.raises(EnvTimeoutError):
            wait(timeout=0.05)

    def good_action(self):
        return good_gym_action()

    def bad_actions(self):
        n = NUM_ENVS
        kinds, box = good_gym_action()
        return {
            "wrong_shape": ((kinds, np.zeros((n, 3), np.float32)),
                            rf"action\[1\]: expected shape \({n}, 2\) .*got shape \({n}, 3\)"),
            "wrong_batch_size": ((np.zeros(n + 1, np.int64), box),
                                 rf"action\[0\]: expected shape \({n},\) .*got shape "
                                 rf"\({n + 1},\)"),
            "wrong_structure": (kinds, r"action: expected a tuple of 2 batched values"),
            # float64 for the float32 Box reaches the env as it is (as with
            # AsyncVectorEnv); floats for the Discrete do not cast ("same_kind").
            "unsafe_dtype": ((kinds.astype(np.float64), box),
                             r"action\[0\]: expected dtype int64 .*dtype float64"),
        }

    def accepted_actions(self):
        wide = np.array([[1, 9], [2, 9], [3, 9]], np.int64)[:, 0]
        box = np.asfortranarray(np.array([[0.25, -0.5], [0.5, 0.75], [-1, 1]],
                                         np.float32))
        assert not wide.flags.c_contiguous and not box.flags.c_contiguous
        return [((wide, box), np.column_stack([[1, 2, 3], box])),
                ((np.array([0, 1, 2], np.uint8), box.astype(np.float16)),
                 np.column_stack([[0, 1, 2], box]))]

    def out_of_bounds_action(self):
        kinds = np.array([7, -5, 1000], np.int64)             # Discrete(4)
        box = np.array([[3.5, -9.0], [100.0, 0.0], [-2.0, 2.0]], np.float32)  # [-1, 1]
        return (kinds, box), np.column_stack([kinds, box])

    def received(self, obs):
        return obs[:, 2:5]


# -- helpers --------------------------------------------------------------------------


@contextlib.contextmanager
def raises_worker_exception(kind: str, env_id: int = VICTIM):
    """Expects the exception of ``tests.support.probe_envs.inject(kind)``, as re-raised by
    the parent: the original type (or ``EnvironmentProcessError`` when it cannot
    be pickled), the worker's traceback and the env id."""
    if kind == "raise":
        expected, match = ValueError, "injected failure"
    else:
        expected, match = EnvironmentProcessError, "UnpicklableError.*injected unpicklable"
    with pytest.raises(expected, match=match) as info:
        yield info
    error = info.value
    remote = error.__cause__ if kind == "raise" else error
    assert isinstance(remote, EnvironmentProcessError), repr(remote)
    assert remote.env_id == env_id
    assert f"env {env_id}" in str(remote)
    assert "in inject" in remote.remote_traceback  # the worker-side function that raised
    if kind == "raise_unpicklable":
        assert not isinstance(error, UnpicklableError)
        assert "in inject" in str(error)


def kill_later(frontend: "FrontEnd", env: Any,
               delay: float) -> Tuple[threading.Timer, List[float]]:
    """SIGKILLs the victim worker of ``env`` after ``delay`` seconds, from a timer.

    Returns the started timer and a list that receives the time of the kill
    (``time.monotonic()``) once it happened.
    """
    killed_at: List[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.kill(frontend.victim_pid(env), signal.SIGKILL)

    killer = threading.Timer(delay, kill)
    killer.start()
    return killer, killed_at


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts: it runs no more)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_all_gone(pids: List[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.02)
    return all(gone(p) for p in pids)


def kill_leftovers(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def close_bound() -> float:
    """What ``ProcessEnvironment.close()`` documents as its bound."""
    return (shutdown.CLOSE_POLITE_TIMEOUT + shutdown.CLOSE_TERMINATE_TIMEOUT
            + shutdown.KILL_TIMEOUT)


def timed_close(frontend: FrontEnd, env: Any) -> float:
    """Seconds ``frontend.close(env)`` took. A gymnasium front end closed with a
    call pending warns as ``AsyncVectorEnv`` does (asserted in its own tests)."""
    begin = time.monotonic()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*Calling `close` while waiting for a pending call",
                                UserWarning)
        frontend.close(env)
    return time.monotonic() - begin


def load_long_run() -> Any:
    """``benchmarks/long_run.py`` as a module."""
    spec = importlib.util.spec_from_file_location("long_run",
                                                  REPO_ROOT / "benchmarks" / "long_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the contract ---------------------------------------------------------------------


class FaultContract:
    """Faults every front end handles the same way (bound by ``frontend``)."""

    frontend: FrontEnd

    @pytest.fixture
    def short_close(self, monkeypatch) -> float:
        """Makes closing a stuck worker quick; returns the bound of ``close()``."""
        monkeypatch.setattr(shutdown, "CLOSE_POLITE_TIMEOUT", SHORT_POLITE)
        return close_bound()

    # 1. worker exceptions ------------------------------------------------------------

    @pytest.mark.parametrize("phase", PHASES)
    @pytest.mark.parametrize("kind", EXCEPTIONS)
    def test_worker_exception_keeps_type_traceback_and_env_id(self, kind, phase, caplog):
        fe = self.frontend
        fault = Fault(kind, phase)
        if phase == "ctor":
            with raises_worker_exception(kind):
                fe.make(fault)
            return  # the autouse fixture checks that no worker is left
        env = fe.make(fault)
        try:
            if phase == "close":
                # close() never raises: the env's own error is logged, whole.
                with caplog.at_level(logging.WARNING):
                    assert timed_close(fe, env) < close_bound()
                assert f"env {VICTIM}: close() raised in the worker" in caplog.text
                assert "injected" in caplog.text and "in inject" in caplog.text
                return
            fe.prepare(env, phase)
            with raises_worker_exception(kind):
                fe.run(env, phase)
            # Still usable: every env resets, steps and answers calls.
            obs = fe.reset(env)
            np.testing.assert_array_equal(obs[:, 0], fe.env_ids())
            obs = fe.step(env)
            np.testing.assert_array_equal(obs[:, 1], 1)
            assert fe.call(env, "ping") == fe.env_ids()
        finally:
            fe.close(env)

    # 2. worker deaths ----------------------------------------------------------------

    @pytest.mark.parametrize("phase", PHASES)
    @pytest.mark.parametrize("kind", list(DEATHS))
    def test_worker_death_raises_worker_died_error_within_a_second(self, kind, phase,
                                                                    tmp_path, caplog):
        fe = self.frontend
        stamp = tmp_path / "died"
        fault = Fault(kind, phase, stamp=str(stamp))
        if phase == "ctor":
            with pytest.raises(WorkerDiedError,
                               match=f"env {VICTIM} died during start: {DEATHS[kind]}"):
                fe.make(fault)
            assert time.monotonic() - died_at(stamp) < CRASH_BOUND
            return
        env = fe.make(fault)
        try:
            if phase == "close":
                with caplog.at_level(logging.WARNING):
                    assert timed_close(fe, env) < close_bound()
                assert stamp.exists()
                assert f"env {VICTIM}: the worker died while closing" in caplog.text
                return
            fe.prepare(env, phase)
            with pytest.raises(WorkerDiedError, match=f"env {VICTIM} .*{DEATHS[kind]}") as info:
                fe.run(env, phase)
            assert time.monotonic() - died_at(stamp) < CRASH_BOUND
            assert info.value.env_id == VICTIM
            # Every later use raises it again; close() returns quietly.
            with pytest.raises(WorkerDiedError, match=f"env {VICTIM} "):
                fe.step(env)
        finally:
            fe.close(env)

    @pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
    def test_worker_killed_from_outside_is_reported_within_a_second(self, busy):
        fe = self.frontend
        env = fe.make(Fault("hang", "step") if busy else None)
        try:
            fe.reset(env)
            killer, killed_at = kill_later(fe, env, 0.3 if busy else 0.0)
            if not busy:
                killer.join()
                time.sleep(0.1)  # dead before the next request
            with pytest.raises(WorkerDiedError, match=f"env {VICTIM} .*{DEATHS['sigkill']}"):
                fe.step(env)
            reported_at = time.monotonic()
            killer.join()
            assert reported_at - killed_at[0] < CRASH_BOUND
        finally:
            fe.close(env)

    # 3. hung workers -----------------------------------------------------------------

    @pytest.mark.parametrize("phase", RUN_PHASES)
    def test_hung_worker_times_out_and_close_is_bounded(self, phase, short_close):
        fe = self.frontend
        env = fe.make_with_timeout(Fault("hang", phase), WAIT_TIMEOUT)
        pids = fe.pids(env)
        try:
            fe.prepare(env, phase)
            begin = time.monotonic()
            with pytest.raises(EnvTimeoutError, match=f"{VICTIM}") as info:
                fe.run(env, phase, timeout=WAIT_TIMEOUT)
            waited = time.monotonic() - begin
            assert WAIT_TIMEOUT * 0.9 <= waited < WAIT_TIMEOUT + SLACK
            assert isinstance(info.value, TimeoutError)
            assert isinstance(info.value, multiprocessing.TimeoutError)
            fe.after_timeout(env, phase)
        finally:
            closed_in = timed_close(fe, env)
        assert closed_in < short_close + SLACK
        assert wait_all_gone(pids, timeout=1.0)

    def test_hang_in_close_is_bounded(self, short_close):
        fe = self.frontend
        env = fe.make(Fault("hang", "close"))
        pids = fe.pids(env)
        fe.reset(env)
        assert timed_close(fe, env) < short_close + SLACK
        assert wait_all_gone(pids, timeout=1.0)

    def test_hung_constructor_gives_way_to_ctrl_c(self):
        with alarm(KeyboardInterrupt, 1.0), pytest.raises(KeyboardInterrupt):
            self.frontend.make(Fault("hang", "ctor"))
        # The autouse fixture checks that no worker is left.

    # 6. bad input ------------------------------------------------------------------------

    @pytest.mark.parametrize("case", BAD_ACTIONS)
    def test_bad_action_is_refused_naming_the_field_and_changes_nothing(self, case):
        fe = self.frontend
        action, match = fe.bad_actions()[case]
        env = fe.make_for_bad_input()
        try:
            fe.reset(env)
            before = fe.step(env, fe.good_action())
            with pytest.raises(ValueError, match=match):
                fe.step(env, action)
            after = fe.step(env, fe.good_action())
            # Nothing reached the envs: each took exactly one more step.
            np.testing.assert_array_equal(after[:, 1], before[:, 1] + 1)
            np.testing.assert_array_equal(fe.received(after), fe.received(before))
        finally:
            fe.close(env)

    def test_non_contiguous_and_safely_cast_actions_are_accepted(self):
        fe = self.frontend
        env = fe.make_for_bad_input()
        try:
            fe.reset(env)
            for action, expected in fe.accepted_actions():
                np.testing.assert_array_equal(fe.received(fe.step(env, action)), expected)
        finally:
            fe.close(env)

    def test_actions_outside_the_bounds_are_passed_through_unclipped(self):
        fe = self.frontend
        action, expected = fe.out_of_bounds_action()
        env = fe.make_for_bad_input()
        try:
            fe.reset(env)
            np.testing.assert_array_equal(fe.received(fe.step(env, action)), expected)
        finally:
            fe.close(env)

    @pytest.mark.parametrize("kind", BAD_OBSERVATIONS)
    def test_observation_not_matching_the_spec_is_named_by_the_worker(self, kind):
        fe = self.frontend
        env = fe.make(Fault(kind, "step"))
        try:
            fe.reset(env)
            with pytest.raises(ValueError, match=fe.bad_observation_errors[kind]) as info:
                fe.step(env)
            cause = info.value.__cause__
            assert isinstance(cause, EnvironmentProcessError) and cause.env_id == VICTIM
            assert cause.remote_traceback  # it came from the worker
            obs = fe.step(env)  # the env keeps working
            np.testing.assert_array_equal(obs[:, 0], fe.env_ids())
        finally:
            fe.close(env)

    def test_observation_of_a_dtype_that_converts_is_converted_to_the_spec(self):
        fe = self.frontend
        env = fe.make(Fault("obs_float64", "step"))
        try:
            fe.reset(env)
            obs = fe.step(env)
            assert obs.dtype == np.float32  # what the shared-memory path returns too
            np.testing.assert_array_equal(obs[:, 0], fe.env_ids())
        finally:
            fe.close(env)

    # 7. long runs ----------------------------------------------------------------------

    def test_short_long_run_keeps_memory_fds_and_shm_flat(self):
        long_run = load_long_run()
        report = long_run.run(self.frontend.long_run_backend, LONG_RUN_ENV_STEPS,
                              LONG_RUN_NUM_ENVS, warmup_env_steps=4000, call_every=100)
        assert report.env_steps == LONG_RUN_ENV_STEPS
        assert report.violations(max_rss_growth=5.0) == []


class BatchedFaultContract(FaultContract):
    """Faults of a batch of envs (one worker fails, the others do not)."""

    def test_death_while_others_still_start_is_reported_at_once(self, tmp_path):
        fe = self.frontend
        stamp = tmp_path / "died"
        # Env 0 takes 3 s to construct; env 1 dies at once.
        with pytest.raises(WorkerDiedError, match=f"env {VICTIM} died during start"):
            fe.make(Fault("sigkill", "ctor", stamp=str(stamp)), ctor_delays={0: 3.0},
                    parallel_start=True)
        assert time.monotonic() - died_at(stamp) < CRASH_BOUND

    def test_exception_leaves_the_other_envs_in_step(self):
        # Env 1 raises at once while the others still step: once the error is
        # raised, every env is idle and in step again.
        fe = self.frontend
        env = fe.make(Fault("raise", "step"), step_delays={0: 0.3, 2: 0.3})
        try:
            fe.reset(env)
            with raises_worker_exception("raise"):
                fe.step(env)
            obs = fe.step(env)
            np.testing.assert_array_equal(obs[:, 0], fe.env_ids())
            np.testing.assert_array_equal(obs[:, 1], [2, 1, 2])  # env 1 raised once
        finally:
            fe.close(env)

    def test_step_interrupted_by_ctrl_c_leaves_the_env_usable(self):
        # A Ctrl-C while the envs step (e.g. a notebook cell interrupted, then
        # run again): the interrupted step's result is lost to the caller, the
        # envs took that step, and the next step goes on from there.
        fe = self.frontend
        env = fe.make(step_delays={i: 0.2 for i in range(NUM_ENVS)})
        try:
            fe.reset(env)
            before = fe.step(env)
            with alarm(KeyboardInterrupt, 0.05), pytest.raises(KeyboardInterrupt):
                fe.step(env)
            after = fe.step(env)
            np.testing.assert_array_equal(after[:, 0], fe.env_ids())
            np.testing.assert_array_equal(after[:, 1], before[:, 1] + 2)
        finally:
            fe.close(env)
