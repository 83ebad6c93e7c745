"""Placing worker processes on CPUs (the ``worker_cpus`` option).

By default the OS places the workers. When more workers than cores step
CPU-bound envs in lockstep, it sometimes leaves three busy workers on one
core and one on the other for a whole batched step (Linux does not migrate a
task that ran in the last ~0.5 ms), and that step takes 1.5x as long.
Pinning worker ``i`` to CPU ``cpus[i % len(cpus)]`` spreads them evenly; see
``docs/benchmarks.md`` (W3, 4 envs on 2 cores). The price: a pinned worker
cannot move away from a core that something else keeps busy.
"""

import os
from typing import List, Optional, Sequence, Union

WorkerCpus = Union[None, str, Sequence[int]]

SPREAD = "spread"


def usable_cpus() -> List[int]:
    """The CPUs this process may run on, in increasing order."""
    return sorted(os.sched_getaffinity(0))


def plan_worker_cpus(worker_cpus: WorkerCpus, num_workers: int) -> Optional[List[int]]:
    """Checks ``worker_cpus`` and returns the CPU of each worker (``None``: OS decides).

    Args:
        worker_cpus: ``None`` (the OS places the workers), ``"spread"``
            (worker ``i`` on the ``i % n``-th of the ``n`` CPUs this process
            may use) or a sequence of CPU ids (worker ``i`` on
            ``worker_cpus[i % len(worker_cpus)]``).
        num_workers: how many worker processes there will be.

    Raises:
        ValueError: naming ``worker_cpus`` and what it expected.
    """
    if worker_cpus is None:
        return None
    allowed = usable_cpus()
    if isinstance(worker_cpus, str):
        if worker_cpus != SPREAD:
            raise ValueError(f"worker_cpus: expected None, {SPREAD!r} or a sequence of CPU "
                             f"ids, got the string {worker_cpus!r}")
        cpus = allowed
    else:
        try:
            cpus = list(worker_cpus)
        except TypeError:
            raise ValueError(f"worker_cpus: expected None, {SPREAD!r} or a sequence of CPU "
                             f"ids, got {worker_cpus!r}") from None
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
