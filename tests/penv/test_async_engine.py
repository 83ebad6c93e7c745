"""EnvPool-style asynchronous use: post to some workers, receive the first k."""

import numpy as np

from alf_env.data_plane.shared_block import JobType, WaitStatus

from . import _workers
from .conftest import close_workers, make_block, start_job_workers


def test_first_k_are_the_fastest(start_process):
    block = make_block(4)
    controller = block.controller()
    processes = start_job_workers(start_process, block, controller, 4)
    # warm up (first jobs pay for imports/page faults)
    controller.post(range(4), JobType.STEP, _workers.step_arg(0))
    assert controller.wait(4, timeout_s=30)[0] == WaitStatus.OK
    for i in (3, 1, 0, 2):  # post order differs from speed order
        controller.post([i], JobType.STEP, _workers.step_arg(1, delay_us=i * 150_000))
    status, ids = controller.wait(2, timeout_s=30)
    assert status == WaitStatus.OK and list(ids) == [0, 1]
    status, ids = controller.wait(1, timeout_s=30)
    assert status == WaitStatus.OK and list(ids) == [2]
    controller.post([0], JobType.STEP, _workers.step_arg(2))  # re-post while 3 runs
    status, ids = controller.wait(2, timeout_s=30)
    assert status == WaitStatus.OK and list(ids) == [0, 3]
    close_workers(controller, processes)


def test_random_subsets_and_random_k(start_process):
    num_workers = 6
    rng = np.random.default_rng(1234)
    block = make_block(num_workers)
    controller = block.controller()
    processes = start_job_workers(start_process, block, controller, num_workers)
    idle = set(range(num_workers))
    steps = np.zeros(num_workers, dtype=np.int64)
    args = {}
    serial = 0
    for _ in range(400):
        if idle and (controller.num_outstanding == 0 or rng.random() < 0.6):
            chosen = rng.choice(sorted(idle), size=rng.integers(1, len(idle) + 1),
                                replace=False)
            serial += 1
            arg = _workers.step_arg(serial, delay_us=int(rng.choice([0, 0, 100, 2000])))
            for i in chosen:
                block["inp"][i] = serial * 100 + i
                args[int(i)] = arg
            controller.post(chosen, JobType.STEP, arg)
            idle -= set(int(i) for i in chosen)
        k = int(rng.integers(1, controller.num_outstanding + 1))
        status, ids = controller.wait(k, timeout_s=30)
        assert status == WaitStatus.OK and len(ids) == k
        assert len(set(ids.tolist())) == k and not (set(ids.tolist()) & idle)
        for i in ids.tolist():
            steps[i] += 1
            assert tuple(block["rec"][i]) == (i, steps[i], args[i])
            np.testing.assert_array_equal(block["out"][i], block["inp"][i])
            idle.add(i)
    if controller.num_outstanding:
        assert controller.wait(controller.num_outstanding, timeout_s=30)[0] == WaitStatus.OK
    close_workers(controller, processes)
