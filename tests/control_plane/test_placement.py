"""alf_env.control_plane.placement: pinning and unpinning real worker processes."""

import os
import time

from alf_env.control_plane.affinity import normal_scheduling
from alf_env.control_plane.placement import Placement, place_workers


def test_place_workers_pins_and_unpins_a_real_process_and_skips_a_dead_one():
    allowed = sorted(os.sched_getaffinity(0))
    pid = os.fork()
    if pid == 0:  # a child that only waits to be moved
        time.sleep(30)
        os._exit(0)
    try:
        place_workers([pid, 2 ** 22 + 12345], [allowed[-1], allowed[0]], Placement.PINNED)
        assert os.sched_getaffinity(pid) == {allowed[-1]}
        place_workers([pid], [allowed[-1]], Placement.OS)
        assert sorted(os.sched_getaffinity(pid)) == allowed
        if hasattr(os, "SCHED_BATCH"):
            os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
            normal_scheduling([pid, 2 ** 22 + 12345])
            assert os.sched_getscheduler(pid) == os.SCHED_OTHER
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
