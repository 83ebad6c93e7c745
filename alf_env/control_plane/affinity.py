"""Placing worker processes on CPUs (the ``worker_cpus`` option).

Left to itself, the OS sometimes places workers that step CPU-bound envs in
lockstep badly: with a spinning trainer there is one more runnable process
than cores, and the kernel's balancer may leave two busy workers on one core
and none on the other for a whole batched step (Linux does not migrate a
task that ran in the last ~0.5 ms). Pinning worker ``i`` to CPU
``cpus[i % len(cpus)]`` (``"spread"``) places them evenly, at a price: a
pinned worker cannot move away from a core that another program keeps busy,
and beside one busy process it ran at half the speed.

So ``"auto"``, the default of the shared-memory front ends, *plans* a spread
(:func:`plan_worker_cpus`) when the workers step in lockstep and cover every
usable CPU, and pins them to it only while no other process uses the CPUs
(:mod:`alf_env.control_plane.quiet_pinning`, :func:`pinned_when_quiet`).
Such workers, pinned or not, keep every core busy during a step: the trainer
then spins longer for them (``workers_spread``, csrc/futex.h).

Scheduling policy
-----------------
Every worker starts under Linux's ``SCHED_BATCH`` policy
(:func:`batch_scheduling`): a worker woken by a job or a pipe message does not
preempt the process that woke it, so the pipe front end's trainer finishes
posting a step to all its workers before they take its core. The policy
changes how wake-ups preempt, never a worker's share of CPU time. The
shared-memory front ends put their workers back under ``SCHED_OTHER``
(:func:`normal_scheduling`): their posts are one futex wake per worker, and on
a busy machine a worker woken for a job must be able to preempt whatever holds
its core. The measurements behind both choices are in docs/benchmarks.md.
"""

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
    """How many CPUs this process may run on (its affinity mask; not on Linux:
    the machine's CPU count), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def plan_worker_cpus(worker_cpus: WorkerCpus, num_workers: int,
                     lockstep: bool = False) -> Optional[List[int]]:
    """Checks ``worker_cpus`` and returns the CPU of each worker (``None``: OS decides).

    Args:
        worker_cpus: ``None`` (the OS places the workers), ``"spread"``
            (worker ``i`` on the ``i % n``-th of the ``n`` CPUs this process
            may use), ``"auto"`` (the CPUs of ``"spread"`` when ``lockstep``
            and ``num_workers >= n >= 2``, else ``None``; pinned to them only
            while the machine is otherwise idle, see :func:`pinned_when_quiet`) or a
            sequence of CPU ids (worker ``i`` on
            ``worker_cpus[i % len(worker_cpus)]``).
        num_workers: how many worker processes there will be.
        lockstep: whether every step waits for all the workers (shared-memory
            front ends in their synchronous mode); only ``"auto"`` reads it.

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


def pinned_cpus(worker_cpus: WorkerCpus, plan: Optional[Sequence[int]]
                ) -> Optional[Sequence[int]]:
    """The CPUs to pin the workers to for good, given :func:`plan_worker_cpus`'s
    ``plan`` (``None``: the OS places them; ``"auto"``: :func:`pinned_when_quiet`)."""
    return None if isinstance(worker_cpus, str) and worker_cpus == AUTO else plan


def pinned_when_quiet(worker_cpus: WorkerCpus, plan: Optional[Sequence[int]]
                      ) -> Optional[Sequence[int]]:
    """The CPUs to pin the workers to while no other process uses the CPUs
    (``"auto"`` with a plan: control_plane/quiet_pinning.py), else ``None``."""
    return plan if isinstance(worker_cpus, str) and worker_cpus == AUTO else None


def pin_workers(pids: Sequence[int], plan: Optional[Sequence[int]]) -> None:
    """Pins process ``pids[i]`` to CPU ``plan[i]`` (nothing when ``plan`` is None).

    Raises:
        OSError: ``sched_setaffinity`` failed (the message names the worker).
    """
    if plan is None:
        return
    for i, (pid, cpu) in enumerate(zip(pids, plan)):
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError as err:
            raise OSError(err.errno, f"worker_cpus: cannot pin worker {i} (pid {pid}) to "
                                     f"CPU {cpu}: {err.strerror}") from err


def batch_scheduling() -> bool:
    """Puts the calling process (a worker) under ``SCHED_BATCH`` (see the module
    docstring); returns whether it did (never raises: where the OS has no
    ``SCHED_BATCH`` or refuses it, the worker runs as it was and logs so)."""
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
    """Puts workers back under the normal policy (``SCHED_OTHER``; why: the
    module docstring). Never raises: a worker that has exited, or an OS that
    refuses, keeps what it has."""
    policy = getattr(os, "SCHED_OTHER", None)
    if policy is None:
        return
    for pid in pids:
        try:
            os.sched_setscheduler(pid, policy, os.sched_param(0))
        except OSError:
            continue
