"""csrc/openmp_park.cc: the trainer's OpenMP pool asleep in an open region, then back."""

import os
import threading
import time

import pytest

from alf_env import _penv
from alf_env.data_plane.pool_park import loaded_openmp_runtime

torch = pytest.importorskip("torch")


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    x = torch.randn(256, 256)
    x @ x  # the pool exists
    try:
        yield x
    finally:
        torch.set_num_threads(threads)


def test_a_runtime_that_is_not_loaded_is_refused_by_name():
    with pytest.raises(RuntimeError, match="OpenMpPark: the OpenMP runtime /nowhere/libgomp.so"):
        _penv.OpenMpPark("/nowhere/libgomp.so")


def test_parked_threads_sleep_and_the_pool_works_after_release(two_threads):
    x = two_threads
    expected = x @ x
    park = _penv.OpenMpPark(loaded_openmp_runtime())
    assert park.pool_cpu_ns() == -1  # no park has named the pool's threads yet
    assert park.pool_tids() == []
    assert park.park() and park.parked
    assert not park.park()  # parked already
    assert park.pool_cpu_ns() == -1  # not while parked
    park.release()
    assert not park.parked
    before = park.pool_cpu_ns()
    assert before > 0
    # The pool's one other thread, by its id in this process (not the caller's).
    tids = park.pool_tids()
    assert len(tids) == 1 and str(tids[0]) in os.listdir("/proc/self/task")
    assert tids[0] != threading.get_native_id()
    assert park.park()
    time.sleep(0.05)
    park.release()
    # Asleep for 50 ms: a spinning pool thread would have used most of them.
    assert park.pool_cpu_ns() - before < 10_000_000
    torch.testing.assert_close(x @ x, expected)


def test_an_op_inside_the_parked_region_runs_on_one_thread_and_is_right(two_threads):
    x = two_threads
    expected = x @ x
    park = _penv.OpenMpPark(loaded_openmp_runtime())
    assert park.park()
    try:
        torch.testing.assert_close(x @ x, expected)
    finally:
        park.release()


def test_one_thread_is_not_parked(two_threads):
    torch.set_num_threads(1)
    park = _penv.OpenMpPark(loaded_openmp_runtime())
    assert not park.park() and not park.parked
    park.release()  # nothing parked: nothing to do
