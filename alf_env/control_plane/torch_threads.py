"""The trainer's torch threads against the cores its env workers step on: said once at
start, and once more when they wait (docs/benchmarks.md, "The trainer's torch threads")."""

import sys
from typing import Optional

from absl import logging

from alf_env.control_plane.affinity import usable_cpu_count

_advised = False  # once per process
_warned = False


def torch_threads_advice(num_workers: int) -> Optional[str]:
    """The advice beside ``num_workers`` workers, or ``None`` if torch leaves their cores free."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    threads = int(torch.get_num_threads())
    cpus = usable_cpu_count()
    if threads < 2 or threads + num_workers <= cpus:
        return None
    better = max(1, cpus - num_workers)
    return (f"alf_env: torch runs {threads} threads on {cpus} CPUs beside {num_workers} env "
            f"workers. While any other process keeps a core busy, torch's threads then "
            f"wait for each other's core at every op, and a training loop runs many times "
            f"slower (with any vector env); torch.set_num_threads({better}) avoids that "
            f"(docs/benchmarks.md, \"The trainer's torch threads\").")


def advise_torch_threads(num_workers: int) -> None:
    """Logs :func:`torch_threads_advice` once per process, at INFO: on a quiet machine
    torch's threads cost a parked step nothing."""
    global _advised
    if _advised:
        return
    advice = torch_threads_advice(num_workers)
    if advice is not None:
        _advised = True
        logging.info(advice)


def pool_waiting_warning(threads: int, share: float) -> str:
    """The warning that torch's ``threads`` waited for a CPU ``share`` of a second."""
    better = max(1, int(threads * (1.0 - share)))
    return (f"alf_env: torch's OpenMP threads waited for a CPU {share:.0%} of the last "
            f"second of this training loop: it gets fewer CPUs than torch's {threads} "
            f"threads (other processes are using them), and they now wait for each other's "
            f"core at every op, which makes every step many times slower (with any vector "
            f"env). torch.set_num_threads({better}) avoids that (docs/benchmarks.md, "
            f"\"The trainer's torch threads\").")


def warn_pool_waiting(threads: int, share: float) -> None:
    """Logs :func:`pool_waiting_warning` once per process, as a WARNING (it is happening)."""
    global _warned
    if not _warned:
        _warned = True
        logging.warning(pool_waiting_warning(threads, share))
