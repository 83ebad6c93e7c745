"""Training scripts that do what alf_env's front ends must survive, or refuse.

Run by ``tests/faults/test_hostile_programs.py``::

    python -m tests.faults.hostile_script SCENARIO FRONT_END [VARIANT] [START_METHOD]
    python -m tests.faults.hostile_script all FRONT_END

Front ends: ``process`` (one ``ProcessEnvironment``, env id 1), ``parallel``,
``fast``, ``vector``, ``vector_pipe`` (``FastVectorEnv(shared_memory=False)``)
and ``sb3`` (two envs, ids 0 and 1, one worker each).
Scenarios (the script prints what the test checks on stdout, one fact a line):

* ``fork VARIANT``: ``os.fork()`` after a few steps; the child ends (``exit``:
  ``sys.exit(0)``; ``gc``: drops the env, collects it, ``os._exit(0)``;
  ``close``: ``env.close()``, ``sys.exit(0)``; ``use``: steps the env, which
  must raise ``EnvironmentClosedError``), the trainer steps on and closes.
* ``copy``: ``copy.deepcopy``, ``copy.copy`` and ``pickle.dumps`` of the env
  (each must raise ``TypeError``), then steps and ``close()``.
* ``threads``: a second thread steps while the first is in a slow step,
  then two threads step at once; every env counts the steps it took.
* ``exit_in VARIANT``: env 1 raises ``sys.exit(5)`` (``*_exit``) or
  ``KeyboardInterrupt`` (``*_kbd``) in its constructor (``ctor_*``) or its
  step (``step_*``); the script does not catch what the front end raises.
* ``pdeathsig VARIANT``: ``wait`` prints the worker pids and sleeps (the
  test stops a worker and kills this script); ``thread_start`` creates the
  env in a thread that then ends, and steps it from the main thread.
* ``all``: the scenarios that end with the script still running (every
  ``fork`` variant of the front end, ``copy``, ``threads``), one after
  another in this process, each with an env of its own: one interpreter
  start-up and one import of the front end's libraries for all of them. Before
  each it writes ``scenario NAME <time.monotonic()>`` on stdout and
  ``scenario NAME`` on stderr, and ``scenario end <time.monotonic()>`` on
  stdout at the end, so that the caller can tell their outputs and durations
  apart.
"""

import copy
import functools
import gc
import os
import pickle
import sys
import threading
import time
from typing import Any, Callable, List

import gymnasium as gym
import numpy as np

FRONT_ENDS = ("process", "parallel", "fast", "vector", "vector_pipe", "sb3")
NUM_ENVS = 2
FAULTY_ENV = 1       # the env that raises in ``exit_in``
SLOW_ACTION = 3      # an action whose step takes SLOW_STEP seconds
SLOW_STEP = 2.0
OVERLAP_AFTER = 0.3  # the second thread steps this long after the slow step began
STRESS_STEPS = 200   # steps per thread when two threads step at once
JOIN_TIMEOUT = 30.0  # a thread still running then is hung (printed, exit 2)


def _raise(fault: str) -> None:
    """What the faulty env does (its raise site is what the trainer must show)."""
    if fault.endswith("_exit"):
        sys.exit(5)
    raise KeyboardInterrupt


def _hostile_alf_env(env_id: int = 0, fault: str = "") -> Any:
    from tests.support.alf_envs import CountingEnv

    class HostileAlfEnv(CountingEnv):
        """A ``CountingEnv`` of endless episodes: slow on ``SLOW_ACTION``, counts its steps."""

        def _step(self, action: Any) -> Any:
            if int(action) == SLOW_ACTION:
                time.sleep(SLOW_STEP)
            if fault.startswith("step") and env_id == FAULTY_ENV:
                _raise(fault)
            return super()._step(action)

        def total_steps(self) -> int:
            return self._total_steps

    if fault.startswith("ctor") and env_id == FAULTY_ENV:
        _raise(fault)
    return HostileAlfEnv(env_id=env_id, min_length=10**6, max_length=10**6)


class HostileGymEnv(gym.Env):
    """A gymnasium env: slow on ``SLOW_ACTION``, counts its steps, faulty as told."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, env_id: int = 0, fault: str = "") -> None:
        if fault.startswith("ctor") and env_id == FAULTY_ENV:
            _raise(fault)
        self.env_id = env_id
        self.fault = fault
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if int(action) == SLOW_ACTION:
            time.sleep(SLOW_STEP)
        if self.fault.startswith("step") and self.env_id == FAULTY_ENV:
            _raise(self.fault)
        self.steps += 1
        return np.zeros(2, np.float32), 1.0, False, False, {}

    def total_steps(self) -> int:
        return self.steps


class Trainer:
    """One front end behind ``step() / counts() / pids() / close()``; ``env`` is the env."""

    def __init__(self, front_end: str, fault: str = "", start_method: str = "fork") -> None:
        self.front_end = front_end
        if front_end in ("process", "parallel", "fast"):
            # The envs' module (torch with it) before the workers start, as a
            # trainer has it: each forked worker need not import it again.
            import tests.support.alf_envs  # noqa: F401
        if front_end == "process":
            from alf_env.environments.process_environment import ProcessEnvironment
            self.env = ProcessEnvironment(functools.partial(_hostile_alf_env, fault=fault),
                                          env_id=FAULTY_ENV, start_method=start_method)
            self.env.start()
        elif front_end in ("parallel", "fast"):
            from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
            from alf_env.environments.parallel_environment import ParallelAlfEnvironment
            fns = [functools.partial(_hostile_alf_env, fault=fault)] * NUM_ENVS
            if front_end == "fast":
                self.env = FastParallelEnvironment(fns, start_method=start_method,
                                                   num_workers=NUM_ENVS)
            else:
                self.env = ParallelAlfEnvironment(fns, start_method=start_method)
        else:
            fns = [functools.partial(HostileGymEnv, i, fault) for i in range(NUM_ENVS)]
            if front_end.startswith("vector"):
                from alf_env.vector import FastVectorEnv
                self.env = FastVectorEnv(fns, context=start_method, envs_per_worker=1,
                                         shared_memory=front_end == "vector")
            else:
                from alf_env.sb3 import FastSubprocVecEnv
                self.env = FastSubprocVecEnv(fns, start_method=start_method)
        self.env.reset()

    def step(self, action: int = 0) -> None:
        if self.front_end == "process":
            self.env.step(np.int64(action))
        elif self.front_end in ("parallel", "fast"):
            import torch
            self.env.step(torch.full((NUM_ENVS,), action, dtype=torch.int64))
        else:
            self.env.step(np.full(NUM_ENVS, action, np.int64))

    def counts(self) -> List[int]:
        """The steps each env took."""
        if self.front_end == "process":
            return [self.env.total_steps()]
        if self.front_end in ("parallel", "fast"):
            return list(self.env.call_envs_with_same_args("total_steps"))
        if self.front_end.startswith("vector"):
            return list(self.env.call("total_steps"))
        return list(self.env.env_method("total_steps"))

    def pids(self) -> List[int]:
        if self.front_end == "process":
            return [self.env.pid]
        return list(self.env.worker_pids())

    def close(self) -> None:
        self.env.close()


def say(*words: Any) -> None:
    print(*words, flush=True)


# -- scenarios -------------------------------------------------------------------------


def fork(trainer: Trainer, variant: str) -> None:
    for _ in range(3):
        trainer.step()
    pid = os.fork()
    if pid == 0:
        _forked_child(trainer, variant)
    _, status = os.waitpid(pid, 0)
    say("child", os.waitstatus_to_exitcode(status))
    for _ in range(5):
        trainer.step()
    say("counts", 8, *trainer.counts())
    trainer.close()


def _forked_child(trainer: Trainer, variant: str) -> None:
    """The child's ending; never returns."""
    if variant == "exit":
        sys.exit(0)
    if variant == "gc":
        trainer.env = None  # the only reference: its finalizers run here
        gc.collect()
        os._exit(0)
    if variant == "close":
        trainer.close()
        sys.exit(0)
    if variant == "use":
        from alf_env.errors import EnvironmentClosedError
        try:
            trainer.step()
        except EnvironmentClosedError:
            os._exit(0)
        os._exit(3)  # the child reached the parent's workers
    raise AssertionError(variant)


def copies(trainer: Trainer) -> None:
    trainer.step()
    copiers: List[Callable[[Any], Any]] = [copy.deepcopy, copy.copy, pickle.dumps]
    for copier in copiers:
        try:
            copier(trainer.env)
        except TypeError as exc:
            say("refused", exc)
        else:
            say("copied by", copier.__name__)
    gc.collect()  # what a half-made copy left would be collected now
    for _ in range(3):
        trainer.step()
    say("counts", 4, *trainer.counts())
    trainer.close()
    say("closed")


def threads(trainer: Trainer) -> None:
    ok, refused = [0], []

    def step(action: int, times: int = 1) -> None:
        for _ in range(times):
            try:
                trainer.step(action)
                ok[0] += 1
            except Exception as exc:  # noqa: BLE001 -- the refusal: the test names its type
                refused.append(exc)

    def join(*started: threading.Thread) -> None:
        for t in started:
            t.join(JOIN_TIMEOUT)
        if any(t.is_alive() for t in started):
            say("hung")
            os._exit(2)

    slow = threading.Thread(target=step, args=(SLOW_ACTION,), daemon=True)
    slow.start()
    time.sleep(OVERLAP_AFTER)
    step(0)  # while the slow step runs
    join(slow)
    say("overlap", ok[0], len(refused))
    both = [threading.Thread(target=step, args=(0, STRESS_STEPS), daemon=True)
            for _ in range(2)]
    for t in both:
        t.start()
    join(*both)
    for kind in sorted({f"{type(e).__name__}: {str(e).splitlines()[0]}" for e in refused}):
        say("refusal", kind)
    say("counts", ok[0], *trainer.counts())
    trainer.close()


def pdeathsig(front_end: str, variant: str, start_method: str) -> None:
    if variant == "wait":
        trainer = Trainer(front_end, start_method=start_method)
        trainer.step()
        say("pids", *trainer.pids())
        time.sleep(600)  # killed by the test
        return
    made: List[Trainer] = []
    starter = threading.Thread(target=lambda: made.append(Trainer(front_end,
                                                                  start_method=start_method)))
    starter.start()
    starter.join()
    time.sleep(1.0)  # a parent-death signal tied to the ended thread would have fired
    trainer = made[0]
    for _ in range(5):
        trainer.step()
    say("counts", 5, *trainer.counts())
    trainer.close()


def in_one_run(front_end: str) -> List[List[str]]:
    """The ``[scenario, variant]`` that ``all`` runs for ``front_end``."""
    variants = ["exit", "gc", "close"] + (["use"] if front_end in ("process", "parallel") else [])
    return [["fork", v] for v in variants] + [["copy", ""], ["threads", ""]]


def all_scenarios(front_end: str) -> None:
    for scenario, variant in in_one_run(front_end):
        name = f"{scenario}-{variant}" if variant else scenario
        say("scenario", name, time.monotonic())
        print("scenario", name, file=sys.stderr, flush=True)
        main(scenario, front_end, variant)
    say("scenario", "end", time.monotonic())


def main(scenario: str, front_end: str, variant: str = "", start_method: str = "fork") -> None:
    if scenario == "all":
        all_scenarios(front_end)
        return
    if scenario == "pdeathsig":
        pdeathsig(front_end, variant, start_method)
        return
    trainer = Trainer(front_end, fault=variant if scenario == "exit_in" else "",
                      start_method=start_method)
    say("pids", *trainer.pids())
    if scenario == "fork":
        fork(trainer, variant)
    elif scenario == "copy":
        copies(trainer)
    elif scenario == "threads":
        threads(trainer)
    elif scenario == "exit_in":
        for _ in range(3):
            trainer.step()
        say("not raised")
    else:
        raise AssertionError(scenario)


if __name__ == "__main__":
    main(*sys.argv[1:])
