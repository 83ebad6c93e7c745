"""Thousands of jobs, more workers than cores, random delays and random k.

Each worker writes (its id, its job counter, the job arg) and a copy of its
input row into its rows; the main process checks every row of every finished
worker every time: a lost, duplicated or stale completion fails the test.
"""

import time

import numpy as np
import pytest

from alf_env.data_plane.shared_block import JobType, WaitStatus

from . import _workers
from .conftest import close_workers, make_block, start_job_workers

DELAYS_US = [0, 0, 0, 0, 0, 20, 100, 500, 1000]


@pytest.mark.parametrize("num_workers, spin_us, num_jobs", [
    (16, -1, 20000),   # 17 processes on 2 cores: adaptive, yield-only spinning
    (8, 20, 12000),    # forced spinning while oversubscribed
    (1, -1, 6000),    # fewer processes than cores: adaptive spinning on
])
def test_stress(start_process, num_workers, spin_us, num_jobs):
    rng = np.random.default_rng(num_workers * 1000 + num_jobs)
    block = make_block(num_workers, inp_shape=(5,), inp_dtype=np.int64)
    controller = block.controller(spin_us)
    processes = start_job_workers(start_process, block, controller, num_workers, spin_us)
    rec, inp, out = block["rec"], block["inp"], block["out"]
    steps = np.zeros(num_workers, dtype=np.int64)
    expected_arg = np.zeros(num_workers, dtype=np.int64)
    idle = list(range(num_workers))
    serial = 0
    received = 0
    start = time.monotonic()
    while received < num_jobs or controller.num_outstanding:
        if received < num_jobs and idle and (
                controller.num_outstanding == 0 or rng.random() < 0.5):
            rng.shuffle(idle)
            count = int(rng.integers(1, len(idle) + 1))
            chosen, idle = idle[:count], idle[count:]
            # one post per group, each group with its own argument
            while chosen:
                size = int(rng.integers(1, len(chosen) + 1))
                group, chosen = chosen[:size], chosen[size:]
                serial += 1
                arg = _workers.step_arg(serial, int(rng.choice(DELAYS_US)))
                for i in group:
                    inp[i] = serial * 1000 + i + np.arange(5)
                    expected_arg[i] = arg
                controller.post(group, JobType.STEP, arg)
        k = int(rng.integers(1, controller.num_outstanding + 1))
        status, ids = controller.wait(k, timeout_s=30)
        assert status == WaitStatus.OK, (status, ids)
        ids = ids.tolist()
        assert len(ids) == k and len(set(ids)) == k
        assert not set(ids) & set(idle), "a worker finished twice"
        for i in ids:
            steps[i] += 1
            assert tuple(rec[i]) == (i, steps[i], expected_arg[i]), \
                f"worker {i}: stale or lost completion"
            np.testing.assert_array_equal(out[i], inp[i])
            assert not controller.outstanding(i)
        idle.extend(ids)
        received += k
    assert time.monotonic() - start < 60
    assert steps.sum() >= num_jobs
    close_workers(controller, processes)
