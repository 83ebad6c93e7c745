"""Fixtures of the alf_env._penv tests: every process a test starts is killed
and joined when the test ends, whatever happened."""

import multiprocessing as mp
from typing import Callable, List

import numpy as np
import pytest

from alf_env.data_plane.shared_block import JobType, SharedBlock, WaitStatus

from . import _workers


@pytest.fixture
def start_process() -> Callable[..., mp.Process]:
    """Returns ``start(target, *args, method="fork")`` -> a started Process."""
    started: List[mp.Process] = []

    def start(target, *args, method: str = "fork") -> mp.Process:
        process = mp.get_context(method).Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        try:
            alive = process.is_alive()
        except ValueError:
            continue  # the test joined and closed it already
        if alive:
            process.kill()
        process.join(10)
        assert not process.is_alive(), f"process {process.pid} did not end"


def make_block(num_workers: int, num_rows: int = None, inp_shape=(4,),
               inp_dtype=np.int64) -> SharedBlock:
    """A block with the fields the test workers understand."""
    return SharedBlock(
        [("rec", (3,), np.int64), ("inp", inp_shape, inp_dtype),
         ("out", inp_shape, inp_dtype)],
        num_rows=num_workers if num_rows is None else num_rows,
        num_workers=num_workers)


def start_job_workers(start_process: Callable[..., mp.Process], block: SharedBlock,
                      controller, num_workers: int, *args,
                      method: str = "fork") -> List[mp.Process]:
    """Starts ``_workers.job_worker`` on slots ``0 .. num_workers - 1``.

    ``args`` follow the slot index (``spin_us``, ``burn``); every worker's pid
    is registered with ``controller`` (crash detection).
    """
    processes = [start_process(_workers.job_worker, block, i, *args, method=method)
                 for i in range(num_workers)]
    for i, process in enumerate(processes):
        controller.set_worker_pid(i, process.pid)
    return processes


def close_workers(controller, processes, timeout_s: float = 10.0) -> None:
    """Sends CLOSE to every live worker without a job and joins them all."""
    ids = [i for i, p in enumerate(processes)
           if p.is_alive() and not controller.outstanding(i)]
    if ids:
        controller.post(ids, JobType.CLOSE)
        status, done = controller.wait(len(ids), timeout_s=timeout_s)
        assert status == WaitStatus.OK, (status, done)
    for process in processes:
        process.join(timeout_s)
        assert not process.is_alive()
