"""Timelines of FastVectorEnv's lockstep steps: where each step's time goes, by process.

Usage::

    python benchmarks/step_timeline.py --workload HalfCheetah-v5 --steps 3000
    python benchmarks/step_timeline.py --workload CartPole-v1 --load 1
    python benchmarks/step_timeline.py --workload HalfCheetah-v5 --policy mlp

For every step of ``FastVectorEnv`` (8 envs, default arguments, after
``--warmup`` untimed steps, 1,500 by default) it records, on one clock
(``CLOCK_MONOTONIC``, shared by all processes): the trainer's step start and
return, and each worker's job start (its ``wait_job`` returned a step) and end
(its ``finish``), with the CPU each job started on. The workers' ports are wrapped
before the workers fork, so they record into a shared file. Printed per
quantity, in µs: mean, 10th, 50th, 90th and 99th percentile over the steps:

* ``step``: the trainer's ``env.step``;
* ``w<i> start``: from the step's start to worker ``i``'s job start (posting
  and waking it);
* ``w<i> job``: worker ``i``'s job (its envs and its rows);
* ``after last``: from the last job's end to the step's return (waking the
  trainer and reading the rows);
* ``straggle``: the last job's end minus the first's.

``--load N`` runs N busy processes beside it; ``--policy mlp`` runs the bench's
MLP forward pass before each step (torch at its default threads); ``--set
NAME=VALUE`` passes an argument to ``FastVectorEnv``.
"""

import argparse
import ast
import ctypes
import functools
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np

from alf_env.bench.loads import BusyLoad, make_policy
from alf_env.bench.report import markdown_table
from alf_env.bench.workloads import make_env
from alf_env.data_plane import shared_block
from alf_env.vector import FastVectorEnv

NUM_ENVS = 8  # also the most workers there can be (one env each)
WARMUP = 1500
# Per worker and step: job start, job end (ns), the CPU it started on.
FIELDS = 3

_sched_getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu


class RecordingPort:
    """A worker's port that records each step job's start and end into ``path``."""

    def __init__(self, port: Any, worker: int, path: str, steps: int) -> None:
        self._port = port
        self._worker = worker
        self._path = path
        self._shape = (NUM_ENVS, steps, FIELDS)
        self._rec: Optional[np.ndarray] = None
        self._k = 0
        self._in_step = False

    def wait_job(self, *args: Any) -> Any:
        job = self._port.wait_job(*args)
        if job[0] == shared_block.JobType.STEP:
            if self._rec is None:  # opened in the worker, after the fork
                self._rec = np.memmap(self._path, dtype=np.int64, mode="r+", shape=self._shape)
            self._in_step = True
            if self._k < self._shape[1]:
                self._rec[self._worker, self._k, 0] = time.monotonic_ns()
                self._rec[self._worker, self._k, 2] = _sched_getcpu()
        return job

    def finish(self, *args: Any) -> Any:
        if self._in_step and self._k < self._shape[1]:
            assert self._rec is not None  # opened by the wait_job that began the step
            self._rec[self._worker, self._k, 1] = time.monotonic_ns()
            self._k += 1
        self._in_step = False
        return self._port.finish(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._port, name)


def record(workload: str, steps: int, policy_name: Optional[str],
           warmup: int = WARMUP, **env_kwargs: Any) -> Dict[str, np.ndarray]:
    """Steps ``warmup + steps`` times and returns the timed steps' phases (µs).

    ``env_kwargs`` go to ``FastVectorEnv`` (default arguments otherwise).
    """
    capacity = warmup + steps
    fd, path = tempfile.mkstemp(prefix="alf_env_timeline_")
    os.close(fd)
    np.memmap(path, dtype=np.int64, mode="w+",
              shape=(NUM_ENVS, capacity, FIELDS)).flush()
    original = shared_block.SharedBlock.worker_port

    def recording_port(block: Any, index: int, *args: Any, **kwargs: Any) -> Any:
        return RecordingPort(original(block, index, *args, **kwargs), index, path, capacity)

    shared_block.SharedBlock.worker_port = recording_port  # type: ignore[method-assign]
    policy = make_policy(policy_name, None) if policy_name else None
    env = FastVectorEnv([functools.partial(make_env, workload, i) for i in range(NUM_ENVS)],
                        **env_kwargs)
    try:
        obs, _ = env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(64)]
        trainer = np.zeros((warmup + steps, 2), np.int64)
        for k in range(warmup + steps):
            if policy is not None:
                policy(obs)
            trainer[k, 0] = time.monotonic_ns()
            obs = env.step(actions[k % 64])[0]
            trainer[k, 1] = time.monotonic_ns()
        workers = len(env.worker_pids())
    finally:
        env.close()
        shared_block.SharedBlock.worker_port = original  # type: ignore[method-assign]
    rec = np.array(np.memmap(path, dtype=np.int64, mode="r",
                             shape=(NUM_ENVS, capacity, FIELDS)))
    os.unlink(path)
    trainer = trainer[warmup:]
    # A worker's k-th step job is the trainer's k-th step (resets are not step jobs).
    jobs = [rec[w, warmup:warmup + steps] for w in range(workers)]
    ends = np.array([j[:, 1] for j in jobs])
    out = {"step": (trainer[:, 1] - trainer[:, 0]) / 1e3}
    for w, job in enumerate(jobs):
        out[f"w{w} start"] = (job[:, 0] - trainer[:, 0]) / 1e3
        out[f"w{w} job"] = (job[:, 1] - job[:, 0]) / 1e3
    out["after last"] = (trainer[:, 1] - ends.max(axis=0)) / 1e3
    out["straggle"] = (ends.max(axis=0) - ends.min(axis=0)) / 1e3
    for w, job in enumerate(jobs):
        out[f"w{w} cpu"] = job[:, 2].astype(float)
    return out


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside it")
    parser.add_argument("--policy", choices=["mlp"], default=None)
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed steps first")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a FastVectorEnv argument (a Python literal), e.g. spin_us=0")
    args = parser.parse_args(argv)
    env_kwargs = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set: expected NAME=VALUE, got {item!r}")
        env_kwargs[name] = ast.literal_eval(value)
    with BusyLoad(args.load):
        phases = record(args.workload, args.steps, args.policy, args.warmup, **env_kwargs)
    print(f"{args.workload}, {NUM_ENVS} envs, {args.steps} steps, load {args.load}, "
          f"policy {args.policy or 'none'}, arguments {env_kwargs or 'default'} (µs)")
    rows = [[name, f"{values.mean():.1f}"]
            + [f"{v:.1f}" for v in np.percentile(values, [10, 50, 90, 99])]
            for name, values in phases.items() if not name.endswith(" cpu")]
    print(markdown_table(["phase", "mean", "p10", "p50", "p90", "p99"], rows))
    for name, values in phases.items():
        if name.endswith(" cpu"):
            cpus, counts = np.unique(values.astype(int), return_counts=True)
            print(f"{name}: " + ", ".join(f"CPU {c}: {n}" for c, n in zip(cpus, counts)))


if __name__ == "__main__":
    main(sys.argv[1:])
