"""A training loop whose simulator crashes now and then, through the local front ends.

Run by ``tests/faults/test_restarts.py``::

    python -m tests.faults.restart_script FRONT_END [FRONT_END ...]

``FRONT_END`` is ``vector`` (``FastVectorEnv``), ``vector_pipe`` (its pipe
path), ``vector_async`` (its asynchronous mode), ``sb3``
(``FastSubprocVecEnv``), ``fast`` (``FastParallelEnvironment``) or
``parallel`` (``ParallelAlfEnvironment``). With 4 CartPole envs it runs
``STEPS`` seeded steps undisturbed, then the same steps with a
``RestartPolicy`` while the worker of env ``VICTIM`` dies at three random
(seeded) steps, once in each way a simulator dies (``KINDS``: SIGKILL, a
segfault, ``os._exit(3)``), from inside the env: the loop drops a marker file
naming the way right before the planned step, and the env that sees it
removes it and dies, so each planned kill fires once. It checks that:

* the run completes;
* the surviving envs' values (observations, rewards, ends, infos) equal the
  undisturbed run's at every step;
* each restarted env's episode ends truncated (never terminated) with
  ``env_restarted`` at the step of its kill (ALF: a ``FIRST`` step), and each
  restart's log line gives the cause;

and prints ``ok <front end> <kinds> restarted <envs> at <steps>``. Then it
checks the budget: with ``max_restarts=1`` a second death raises
``WorkerDiedError`` naming the env and the cause (``ok budget``), and the env
still closes.
"""

import faulthandler
import functools
import logging
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import gymnasium as gym
import numpy as np

from alf_env.control_plane.restart import RestartPolicy
from alf_env.errors import WorkerDiedError
from tests.support.probe_envs import inject

NUM_ENVS = 4
STEPS = 2000
VICTIM = 2  # its worker is killed
NOW = [0]  # the loop's step (for the restarts' log lines)
PLANTED = [0]  # kills planted so far in this run
KINDS = ("sigkill", "segv", "exit")
ASYNC_GRACE = 60.0  # seconds the asynchronous mode may run past STEPS for its kills
CAUSES = {"sigkill": "killed by SIGKILL", "segv": "killed by SIGSEGV",
          "exit": "exited with code 3"}


class CrashingEnv(gym.Wrapper):
    """Dies in the step or reset that finds ``marker``, removing it first; the
    marker says how (one of ``KINDS``)."""

    def __init__(self, env: gym.Env, marker: str) -> None:
        super().__init__(env)
        self._marker = marker

    def step(self, action: Any) -> Any:
        self._maybe_die()
        return self.env.step(action)

    def reset(self, **kwargs: Any) -> Any:
        self._maybe_die()
        return self.env.reset(**kwargs)

    def _maybe_die(self) -> None:
        if self._marker and os.path.exists(self._marker):
            with open(self._marker) as f:
                kind = f.read()
            os.unlink(self._marker)
            faulthandler.disable()  # a crash on purpose: no "Fatal Python error" dump
            inject(kind)


def make_gym(env_id: int, marker: str) -> gym.Env:
    return CrashingEnv(gym.make("CartPole-v1"), marker if env_id == VICTIM else "")


def make_alf(marker: str, env_id: int = 0) -> Any:
    from alf_env.environments import suite_gym
    return suite_gym.load("CartPole-v1", env_id=env_id, gym_env_wrappers=(
        functools.partial(CrashingEnv, marker=marker if env_id == VICTIM else ""),))


def plant(marker: str, t: int, kills: Dict[int, str]) -> None:
    """Right before step ``t``: the marker of the next kill planned by then, once
    the kill before it was seen (a restart logged). The synchronous front ends
    see a death in the step it happens; the asynchronous mode may return the
    other worker's envs for a while first."""
    planned = sorted(kills)
    fired = PLANTED[0]
    if fired < len(planned) and t >= planned[fired] and len(LOG.steps) == fired:
        # Renamed into place: a worker stepping meanwhile (the asynchronous mode)
        # never reads a marker that is there but not yet written.
        with open(marker + ".new", "w") as f:
            f.write(kills[planned[fired]])
        os.replace(marker + ".new", marker)
        PLANTED[0] += 1


# -- one run per front end: (stepper, close), the stepper returning per-env records ---

Record = Dict[str, Any]


def gym_records(obs: Any, rewards: Any, terminated: Any, truncated: Any,
                infos: Dict[str, Any], ids: Sequence[int]) -> Dict[int, Record]:
    """Each env's values of a batched gymnasium step (``ids``: its envs, in order)."""
    out = {}
    for k, i in enumerate(ids):
        # The keys this env has (its mask True), with their masks.
        info = {key: np.asarray(value[k]).tolist() for key, value in infos.items()
                if key != "env_id" and infos[key if key.startswith("_") else f"_{key}"][k]}
        out[i] = dict(obs=np.asarray(obs[k]).tolist(), reward=float(rewards[k]),
                      terminated=bool(terminated[k]), truncated=bool(truncated[k]),
                      info=info)
    return out


def run_vector(marker: str, policy: Any, kills: Dict[int, str],
               **options: Any) -> List[Dict[int, Record]]:
    from alf_env.vector import FastVectorEnv
    env = FastVectorEnv([functools.partial(make_gym, i, marker) for i in range(NUM_ENVS)],
                        num_workers=2, restart_policy=policy, **options)
    rng = np.random.default_rng(1)
    steps = []
    try:
        env.reset(seed=list(range(NUM_ENVS)))
        for t in range(STEPS):
            NOW[0] = t
            plant(marker, t, kills)
            steps.append(gym_records(*env.step(rng.integers(0, 2, NUM_ENVS)),
                                     ids=range(NUM_ENVS)))
    finally:
        env.close()
    return steps


def run_vector_async(marker: str, policy: Any, kills: Dict[int, str]) -> List[Dict[int, Record]]:
    """The asynchronous mode: ``recv`` returns 2 envs (one worker's) at a time;
    a step here is one recv (a record per env it returned). recv's order is the
    scheduler's: one worker's envs may keep coming while the other waits for a
    core, or while its death waits for the controller's pid poll (every 50 ms)
    and the restart. So the run goes past ``STEPS`` until every planned kill was
    seen and every env has ``STEPS // 4`` records, for at most ``ASYNC_GRACE`` s."""
    from alf_env.vector import FastVectorEnv
    env = FastVectorEnv([functools.partial(make_gym, i, marker) for i in range(NUM_ENVS)],
                        envs_per_worker=2, batch_size=2, restart_policy=policy)
    rngs = [np.random.default_rng(i) for i in range(NUM_ENVS)]  # actions per env
    steps = []
    try:
        env.reset_async(seed=list(range(NUM_ENVS)))
        # The first worker's envs; the other's resets come out of a recv(),
        # so they are recorded alike (each env's records do not depend on the order).
        obs, infos = env.reset_wait()
        ids = infos["env_id"].tolist()
        zeros = np.zeros(len(ids), np.bool_)
        steps.append(gym_records(obs, zeros.astype(np.float64), zeros, zeros, infos, ids))
        env.send(np.asarray([rngs[i].integers(0, 2) for i in ids]), ids)
        deadline = time.monotonic() + ASYNC_GRACE
        counts = np.zeros(NUM_ENVS, np.int64)
        counts[ids] += 1
        t = 1
        while t < STEPS or ((len(LOG.steps) < len(kills) or counts.min() < STEPS // 4)
                            and time.monotonic() < deadline):
            NOW[0] = t
            plant(marker, t, kills)
            t += 1
            obs, rewards, terminated, truncated, infos = env.recv()
            ids = infos["env_id"].tolist()
            counts[ids] += 1
            steps.append(gym_records(obs, rewards, terminated, truncated, infos, ids))
            env.send(np.asarray([rngs[i].integers(0, 2) for i in ids]), ids)
    finally:
        env.close()
    return steps


def run_sb3(marker: str, policy: Any, kills: Dict[int, str]) -> List[Dict[int, Record]]:
    from alf_env.sb3 import FastSubprocVecEnv
    env = FastSubprocVecEnv([functools.partial(make_gym, i, marker)
                             for i in range(NUM_ENVS)], start_method="fork",
                            num_workers=2, restart_policy=policy)
    rng = np.random.default_rng(1)
    steps = []
    try:
        env.seed(0)
        env.reset()
        for t in range(STEPS):
            NOW[0] = t
            plant(marker, t, kills)
            obs, rewards, dones, infos = env.step(rng.integers(0, 2, NUM_ENVS))
            steps.append({i: dict(obs=obs[i].tolist(), reward=float(rewards[i]),
                                  done=bool(dones[i]),
                                  info={key: np.asarray(value).tolist()
                                        for key, value in infos[i].items()})
                          for i in range(NUM_ENVS)})
    finally:
        env.close()
    return steps


def run_alf(fast: bool, marker: str, policy: Any, kills: Dict[int, str]) -> List[Dict[int, Record]]:
    import torch

    from alf_env.front_ends.alf.fast_parallel_environment import FastParallelEnvironment
    from alf_env.front_ends.alf.parallel_environment import ParallelAlfEnvironment
    ctors = [functools.partial(make_alf, marker, env_id=i) for i in range(NUM_ENVS)]
    env = (FastParallelEnvironment(ctors, num_workers=2, restart_policy=policy) if fast
           else ParallelAlfEnvironment(ctors, restart_policy=policy))
    rng = np.random.default_rng(1)
    steps = []
    try:
        env.seed(list(range(NUM_ENVS)))
        env.reset()
        for t in range(STEPS):
            NOW[0] = t
            plant(marker, t, kills)
            ts = env.step(torch.as_tensor(rng.integers(0, 2, NUM_ENVS)))
            steps.append({i: dict(obs=ts.observation[i].tolist(),
                                  reward=float(ts.reward[i]),
                                  step_type=int(ts.step_type[i]),
                                  discount=float(ts.discount[i]))
                          for i in range(NUM_ENVS)})
    finally:
        env.close()
    return steps


def runner(front_end: str) -> Tuple[Callable[..., List[Dict[int, Record]]], List[int]]:
    """The run of ``front_end`` and the envs its victim's worker hosts."""
    if front_end == "vector":
        return run_vector, [2, 3]
    if front_end == "vector_pipe":
        return functools.partial(run_vector, shared_memory=False), [2, 3]
    if front_end == "vector_async":
        return run_vector_async, [2, 3]
    if front_end == "sb3":
        return run_sb3, [2, 3]
    if front_end == "fast":
        return functools.partial(run_alf, True), [2, 3]
    if front_end == "parallel":
        return functools.partial(run_alf, False), [2]
    raise SystemExit(f"unknown front end {front_end!r}")


# -- the checks ------------------------------------------------------------------------


class RestartLog(logging.Handler):
    """The step of each restart, from its log line (``RestartBudget.spend``)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: List[int] = []
        self.lines: List[str] = []

    def clear(self) -> None:
        """Forgets the restarts seen (a new run)."""
        self.steps, self.lines = [], []
        PLANTED[0] = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "restarting them" in message:
            self.steps.append(NOW[0])
            self.lines.append(message)


LOG = RestartLog()


def restarted(front_end: str, record: Record) -> None:
    """Checks that ``record`` is a restarted env's step (the convention)."""
    if front_end in ("fast", "parallel"):
        assert record["step_type"] == 0, record  # StepType.FIRST
        assert record["reward"] == 0.0 and record["discount"] == 1.0, record
    elif front_end == "sb3":
        info = record["info"]
        assert info["env_restarted"] and info["TimeLimit.truncated"], record
        assert record["done"] and record["reward"] == 0.0, record
        assert len(info["terminal_observation"]) == 4, record
    else:
        assert record["info"]["env_restarted"] and record["info"]["_env_restarted"], record
        assert record["truncated"] and not record["terminated"], record
        assert record["reward"] == 0.0, record


def flagged(record: Record) -> bool:
    """Whether a gymnasium or SB3 record carries the restart flag."""
    return bool(record.get("info", {}).get("env_restarted"))


def per_env(steps: List[Dict[int, Record]]) -> Dict[int, List[Record]]:
    """Each env's records in order (the asynchronous mode's recvs mix envs)."""
    seqs: Dict[int, List[Record]] = {i: [] for i in range(NUM_ENVS)}
    for step in steps:
        for i, record in step.items():
            seqs[i].append(record)
    return seqs


def check(front_end: str, plain: List[Dict[int, Record]], run: List[Dict[int, Record]],
          hosted: List[int], kills: Dict[int, str], log: RestartLog) -> List[int]:
    """Checks a run against the undisturbed one; returns the steps of its restarts."""
    assert len(run) == STEPS or front_end == "vector_async" and len(run) > STEPS, len(run)
    seen, planned = log.steps, sorted(kills)
    assert len(seen) == len(planned), (front_end, seen, planned)
    for line, t in zip(log.lines, planned):
        assert CAUSES[kills[t]] in line, (line, kills[t])
    if front_end != "vector_async":
        # A kill fires in the step after its marker, or in the next one that
        # reaches the env (ALF: not one that only collects a background reset).
        assert all(k <= s <= k + 2 for k, s in zip(planned, seen)), (front_end, seen, planned)
    flags = 0
    for t, step in enumerate(run):
        for i in hosted:
            if t in seen and i in step:
                restarted(front_end, step[i])
            flags += flagged(step.get(i, {}))
    if front_end not in ("fast", "parallel"):
        assert flags == len(hosted) * len(planned), (front_end, flags)  # and nowhere else
    if front_end == "vector_async":
        expected, got = per_env(plain), per_env(run)
        for i in range(NUM_ENVS):
            if i not in hosted:
                n = min(len(expected[i]), len(got[i]))
                assert n >= STEPS // 4, (i, n)
                for j, (want, record) in enumerate(zip(expected[i][:n], got[i][:n])):
                    assert record == want, f"env {i}'s record {j} of {n}: {record} != {want}"
        return seen
    for t, (expected_step, step) in enumerate(zip(plain, run)):
        for i, record in step.items():
            if i not in hosted or t < seen[0]:
                assert record == expected_step[i], (
                    f"env {i} at step {t}: {record} != {expected_step[i]}")
    return seen


def check_budget(run: Callable[..., Any], marker: str) -> None:
    """``max_restarts=1`` and two deaths: the second raises, naming the env and cause."""
    LOG.clear()
    try:
        run(marker, RestartPolicy(max_restarts=1), {10: "sigkill", 30: "sigkill"})
    except WorkerDiedError as exc:
        message = str(exc)
        assert "env 2" in message or "envs [2, 3]" in message, message
        assert "SIGKILL" in message, message
        print("ok budget", flush=True)
        return
    raise AssertionError("a second death with max_restarts=1 did not raise")


def main(front_ends: Sequence[str]) -> None:
    """Each front end: an undisturbed run, a run whose victim dies once in each
    way (seeded steps, ``RestartPolicy(max_restarts=len(KINDS))``), the budget."""
    rng = np.random.default_rng(7)
    logging.getLogger("absl").addHandler(LOG)
    with tempfile.TemporaryDirectory() as tmp:
        marker = os.path.join(tmp, "kill")
        for front_end in front_ends:
            run, hosted = runner(front_end)
            LOG.clear()
            plain = run(marker, None, {})
            steps = rng.choice(np.arange(100, STEPS - 100), len(KINDS), replace=False)
            kills = dict(zip(sorted(steps.tolist()), KINDS))
            LOG.clear()
            got = run(marker, RestartPolicy(max_restarts=len(KINDS)), kills)
            seen = check(front_end, plain, got, hosted, kills, LOG)
            print(f"ok {front_end} {','.join(KINDS)} restarted {hosted} at {seen}", flush=True)
            if front_end not in ("vector_pipe", "vector_async"):
                check_budget(run, marker)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
