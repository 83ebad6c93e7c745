"""Long-run reliability check: memory, descriptors and shared memory stay flat.

Steps the trivial env (W1, ``alf_env.bench.synthetic_envs.TrivialEnv``, which resets
every 100 steps) for ``--env-steps`` env-steps through one front end, with a pipe
call every ``--call-every`` batch steps, and compares the end of the run with the
end of a warm-up: the resident memory of the parent and every worker (growth
below ``--max-rss-growth`` percent), their open descriptors (no growth) and
``/dev/shm`` (no new entry). It prints a table and exits with status 1 if a bound
is broken. ``process`` steps separate ``ProcessEnvironment``s side by side.

Run:  python benchmarks/long_run.py [--env-steps 1000000] [--num-envs 8]
          [--backend fast|parallel|vector|vector_pipe|process] [--json FILE]
"""

import argparse
import functools
import json
import os
import sys
import time
from typing import Any, Callable, List, NamedTuple, Optional

import numpy as np
import psutil

from alf_env.bench.synthetic_envs import TrivialEnv
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper

BACKENDS = ("fast", "parallel", "vector", "vector_pipe", "process")


def trivial_alf_env(env_id: int = 0) -> AlfGymWrapper:
    """The W1 env as an ``AlfEnvironment``."""
    return AlfGymWrapper(TrivialEnv(env_id=env_id), env_id=env_id)


class Sample(NamedTuple):
    """What one process uses at one moment."""
    rss: int   # bytes
    fds: int


class ProcessReport(NamedTuple):
    """A process's use at the end of the warm-up and at the end of the run."""
    role: str
    pid: int
    start: Sample
    end: Sample

    @property
    def rss_growth(self) -> float:
        """RSS growth in percent of the start."""
        return 100.0 * (self.end.rss - self.start.rss) / self.start.rss


class Report(NamedTuple):
    """The result of one long run."""
    backend: str
    num_envs: int
    env_steps: int
    seconds: float
    processes: List[ProcessReport]
    new_shm_entries: List[str]

    def violations(self, max_rss_growth: float = 5.0, max_fd_growth: int = 0) -> List[str]:
        """The bounds this run broke (empty if none)."""
        broken = []
        for p in self.processes:
            if p.rss_growth >= max_rss_growth:
                broken.append(f"{p.role} (pid {p.pid}): RSS grew {p.rss_growth:.2f} % "
                              f"({p.start.rss / 2**20:.1f} -> {p.end.rss / 2**20:.1f} MiB), "
                              f"bound {max_rss_growth} %")
            if p.end.fds - p.start.fds > max_fd_growth:
                broken.append(f"{p.role} (pid {p.pid}): open fds grew {p.start.fds} -> "
                              f"{p.end.fds}")
        if self.new_shm_entries:
            broken.append(f"new /dev/shm entries: {self.new_shm_entries}")
        return broken

    def table(self) -> str:
        """A markdown table of the run."""
        lines = [f"{self.backend}: {self.env_steps:,} env-steps over {self.num_envs} envs "
                 f"in {self.seconds:.1f} s ({self.env_steps / self.seconds:,.0f} "
                 f"env-steps/s); new /dev/shm entries: {len(self.new_shm_entries)}", "",
                 "| process | RSS start (MiB) | RSS end (MiB) | growth | fds start | fds end |",
                 "|---|---|---|---|---|---|"]
        for p in self.processes:
            lines.append(f"| {p.role} | {p.start.rss / 2**20:.1f} | {p.end.rss / 2**20:.1f} "
                         f"| {p.rss_growth:+.2f} % | {p.start.fds} | {p.end.fds} |")
        return "\n".join(lines)


def _shm_entries() -> set:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def _sample(pid: Optional[int]) -> Sample:
    """RSS and open fds of ``pid`` (``None``: this process, fds from /proc/self/fd)."""
    if pid is None:
        return Sample(psutil.Process().memory_info().rss, len(os.listdir("/proc/self/fd")))
    proc = psutil.Process(pid)
    return Sample(proc.memory_info().rss, proc.num_fds())


class _Driver(NamedTuple):
    """A front end reduced to what the run needs."""
    step: Callable[[int], None]     # one batch step; the argument varies the action
    call: Callable[[], None]        # one pipe call
    pids: List[int]
    close: Callable[[], None]


def _alf_batched(cls: Any, num_envs: int) -> _Driver:
    import torch
    env = cls([functools.partial(trivial_alf_env, i) for i in range(num_envs)])
    env.reset()
    actions = [torch.full((num_envs,), a, dtype=torch.int64) for a in (0, 1)]
    return _Driver(lambda t: env.step(actions[t % 2]),
                   lambda: env.call_envs_with_same_args("observation_spec"),
                   env.worker_pids(), env.close)


def _vector(num_envs: int, shared_memory: bool = True) -> _Driver:
    from alf_env.vector import FastVectorEnv
    env = FastVectorEnv([functools.partial(TrivialEnv, env_id=i) for i in range(num_envs)],
                        shared_memory=shared_memory)
    env.reset(seed=0)
    actions = [np.full(num_envs, a, dtype=np.int64) for a in (0, 1)]
    return _Driver(lambda t: env.step(actions[t % 2]), lambda: env.get_attr("env_id"),
                   env.worker_pids(), env.close)


def _process(num_envs: int) -> _Driver:
    from alf_env.environments.process_environment import ProcessEnvironment, close_all, resolve_all
    envs = [ProcessEnvironment(functools.partial(trivial_alf_env, i), env_id=i)
            for i in range(num_envs)]
    try:
        for env in envs:
            env.start()
        resolve_all([env.reset(blocking=False) for env in envs])
    except BaseException:
        close_all(envs)
        raise
    actions = [np.int64(0), np.int64(1)]

    def step(t: int) -> None:
        resolve_all([env.step(actions[t % 2], blocking=False) for env in envs])

    return _Driver(step, lambda: resolve_all([env.call("observation_spec") for env in envs]),
                   [env.pid for env in envs], lambda: close_all(envs))


def _driver(backend: str, num_envs: int) -> _Driver:
    if backend == "fast":
        from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
        return _alf_batched(FastParallelEnvironment, num_envs)
    if backend == "parallel":
        from alf_env.environments.parallel_environment import ParallelAlfEnvironment
        return _alf_batched(ParallelAlfEnvironment, num_envs)
    if backend in ("vector", "vector_pipe"):
        return _vector(num_envs, shared_memory=backend == "vector")
    if backend == "process":
        return _process(num_envs)
    raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")


def run(backend: str, env_steps: int = 1_000_000, num_envs: int = 8,
        warmup_env_steps: Optional[int] = None, call_every: int = 1000,
        progress: Optional[Callable[[str], None]] = None) -> Report:
    """Runs ``env_steps`` env-steps (after a warm-up) and reports what was used.

    Args:
        backend: one of ``BACKENDS``.
        env_steps: env-steps to measure (rounded down to whole batch steps).
        num_envs: envs (one worker each).
        warmup_env_steps: env-steps before the first sample (default: 5 % of
            ``env_steps``, at least 4 episodes of every env).
        call_every: a pipe call every this many batch steps (0: none).
        progress: called with a line of text now and then (e.g. ``print``).
    """
    if warmup_env_steps is None:
        warmup_env_steps = max(env_steps // 20, 400 * num_envs)
    shm_before = _shm_entries()
    driver = _driver(backend, num_envs)
    try:
        t = 0
        for _ in range(warmup_env_steps // num_envs):
            driver.step(t)
            t += 1
            if call_every and t % call_every == 0:
                driver.call()
        roles = [("parent", None)] + [(f"worker {i}", pid) for i, pid in enumerate(driver.pids)]
        start = [_sample(pid) for _, pid in roles]
        batch_steps = env_steps // num_envs
        begin = time.perf_counter()
        report_at = begin + 10.0
        for i in range(batch_steps):
            driver.step(t)
            t += 1
            if call_every and t % call_every == 0:
                driver.call()
            if progress is not None and time.perf_counter() > report_at:
                report_at += 10.0
                progress(f"  {backend}: {(i + 1) * num_envs:,} / {env_steps:,} env-steps")
        seconds = time.perf_counter() - begin
        end = [_sample(pid) for _, pid in roles]
    finally:
        driver.close()
    processes = [ProcessReport(role, pid if pid is not None else os.getpid(), s, e)
                 for (role, pid), s, e in zip(roles, start, end)]
    return Report(backend, num_envs, batch_steps * num_envs, seconds, processes,
                  sorted(_shm_entries() - shm_before))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-steps", type=int, default=1_000_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--backend", choices=BACKENDS, default="fast")
    parser.add_argument("--call-every", type=int, default=1000,
                        help="a pipe call every this many batch steps (0: none)")
    parser.add_argument("--max-rss-growth", type=float, default=5.0,
                        help="bound on the RSS growth of every process, in percent")
    parser.add_argument("--json", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    report = run(args.backend, args.env_steps, args.num_envs, call_every=args.call_every,
                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.table())
    broken = report.violations(args.max_rss_growth)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": report.backend, "num_envs": report.num_envs,
                       "env_steps": report.env_steps, "seconds": report.seconds,
                       "processes": [{"role": p.role, "pid": p.pid,
                                      "rss_start": p.start.rss, "rss_end": p.end.rss,
                                      "fds_start": p.start.fds, "fds_end": p.end.fds}
                                     for p in report.processes],
                       "new_shm_entries": report.new_shm_entries,
                       "violations": broken}, f, indent=2)
    if broken:
        print("\nBOUNDS BROKEN:\n" + "\n".join(f"  {line}" for line in broken))
        return 1
    print(f"\nall bounds held (RSS growth < {args.max_rss_growth} %, no fd growth, "
          f"no new /dev/shm entry)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
