"""Placing worker processes on CPUs (``worker_cpus``: docs/options.rst) and their
scheduling policy (docs/performance_analysis.md, "Choices the defaults rest on")."""

import os
from typing import List, Optional, Sequence, Union

from absl import logging

WorkerCpus = Union[None, str, Sequence[int]]

SPREAD = "spread"
AUTO = "auto"


def usable_cpus() -> List[int]:
    """The CPUs this process may run on, in increasing order."""
    return sorted(os.sched_getaffinity(0))


def usable_cpu_count() -> int:
    """How many CPUs this process may run on (off Linux: the machine's), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def plan_worker_cpus(worker_cpus: WorkerCpus, num_workers: int,
                     lockstep: bool = False) -> Optional[List[int]]:
    """Checks ``worker_cpus`` (docs/options.rst) and returns the CPU of each of
    ``num_workers`` workers (``None``: the OS decides); ``"auto"`` plans ``"spread"`` only
    when every step waits for all of them (``lockstep``) and ``num_workers >= n >= 2`` CPUs.

    Raises:
        ValueError: naming ``worker_cpus`` and what it expected.
    """
    if worker_cpus is None:
        return None
    allowed = usable_cpus()
    expected = f"worker_cpus: expected None, {AUTO!r}, {SPREAD!r} or a sequence of CPU ids, got"
    if isinstance(worker_cpus, str):
        if worker_cpus == AUTO:
            if not (lockstep and num_workers >= len(allowed) >= 2):
                return None
        elif worker_cpus != SPREAD:
            raise ValueError(f"{expected} the string {worker_cpus!r}")
        cpus = allowed
    else:
        try:
            cpus = list(worker_cpus)
        except TypeError:
            raise ValueError(f"{expected} {worker_cpus!r}") from None
        if not cpus:
            raise ValueError("worker_cpus: expected at least one CPU id, got an empty "
                             "sequence; pass None to let the OS place the workers")
        for cpu in cpus:
            if isinstance(cpu, bool) or not isinstance(cpu, int):
                raise ValueError(f"worker_cpus: expected integer CPU ids, got {cpu!r} "
                                 f"in {worker_cpus!r}")
            if cpu not in allowed:
                raise ValueError(f"worker_cpus: CPU {cpu} is not one this process may run "
                                 f"on (expected ids from {allowed})")
    return [cpus[i % len(cpus)] for i in range(num_workers)]


def pinned_cpus(worker_cpus: WorkerCpus, plan: Optional[Sequence[int]]) -> Optional[Sequence[int]]:
    """The CPUs of ``plan`` to pin the workers to for good (not under ``"auto"``)."""
    return None if isinstance(worker_cpus, str) and worker_cpus == AUTO else plan


def pinned_when_quiet(worker_cpus: WorkerCpus, plan: Optional[Sequence[int]]
                      ) -> Optional[Sequence[int]]:
    """The CPUs of ``plan`` to pin the workers to while the machine is quiet (``"auto"``)."""
    return plan if isinstance(worker_cpus, str) and worker_cpus == AUTO else None


def pin_workers(pids: Sequence[int], plan: Optional[Sequence[int]]) -> None:
    """Pins process ``pids[i]`` to CPU ``plan[i]`` (if any); an ``OSError`` names the worker."""
    if plan is None:
        return
    for i, (pid, cpu) in enumerate(zip(pids, plan)):
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError as err:
            raise OSError(err.errno, f"worker_cpus: cannot pin worker {i} (pid {pid}) to "
                                     f"CPU {cpu}: {err.strerror}") from err


def batch_scheduling() -> bool:
    """Puts the calling worker under ``SCHED_BATCH``; returns whether it did (never raises)."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as err:  # e.g. EPERM under a seccomp profile: not worth failing for
        logging.info("alf_env worker: SCHED_BATCH not available (%s); keeping the "
                     "normal policy", err.strerror)
        return False
    return True


def normal_scheduling(pids: Sequence[int]) -> None:
    """Puts workers back under ``SCHED_OTHER``; never raises (a refused one keeps its own)."""
    policy = getattr(os, "SCHED_OTHER", None)
    if policy is None:
        return
    for pid in pids:
        try:
            os.sched_setscheduler(pid, policy, os.sched_param(0))
        except OSError:
            continue
