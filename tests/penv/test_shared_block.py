"""SharedBlock: numpy views, pickling by fd, fork/spawn/forkserver workers,
and cleanup (no /dev/shm entries, no leaked descriptors)."""

import gc
import os
import pickle
from multiprocessing import forkserver, resource_tracker

import numpy as np
import pytest

from alf_env.data_plane.shared_block import JobType, SharedBlock, WaitStatus
from tests.support.shm_leaks import leaked_shm_entries, shm_entries

from . import _workers
from .conftest import close_workers, make_block, start_job_workers

FIELDS = [("obs", (3, 5), np.float32), ("action", (), np.int64),
          ("flag", (7,), np.bool_), ("big", (100,), np.float64)]


def _memfd_count() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if "memfd:alf_env_penv" in os.readlink(f"/proc/self/fd/{name}"):
                count += 1
        except FileNotFoundError:
            pass
    return count


def test_views_have_the_right_shape_dtype_and_strides():
    block = SharedBlock(FIELDS, num_rows=4, num_workers=2)
    for (name, shape, dtype), field in zip(FIELDS, block.layout.fields):
        view = block[name]
        assert view.shape == (4, *shape)
        assert view.dtype == np.dtype(dtype)
        assert view.strides[0] == field.row_stride and field.row_stride % 64 == 0
        assert view.ctypes.data % 64 == 0
        assert view[0].flags.c_contiguous
        assert not view.any()
        assert view is block[name]  # built once
    assert block.views.keys() == {"obs", "action", "flag", "big"}
    assert "obs" in block and "nope" not in block
    with pytest.raises(KeyError, match="no field 'nope'"):
        block["nope"]


def test_fields_and_rows_do_not_overlap():
    block = SharedBlock(FIELDS, num_rows=5, num_workers=3)
    for row in range(5):
        block["obs"][row] = row + 0.5
        block["action"][row] = 100 + row
        block["flag"][row] = row % 2 == 0
        block["big"][row] = -row
    for row in range(5):
        assert (block["obs"][row] == row + 0.5).all()
        assert block["action"][row] == 100 + row
        assert (block["flag"][row] == (row % 2 == 0)).all()
        assert (block["big"][row] == -row).all()


@pytest.mark.parametrize("fields, message", [
    ([("a", (2,), np.float32), ("a", (1,), np.int8)], "listed twice"),
    ([("a", (2,), object)], "Python object references"),
    ([("a", (-1,), np.int8)], "non-negative dimensions"),
    ([("a", (2,))], r"\(name, shape, dtype\) triple"),
    ([("", (2,), np.int8)], "non-empty str name"),
])
def test_bad_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        SharedBlock(fields, num_rows=1, num_workers=1)


def test_pickle_round_trip_shares_memory():
    block = SharedBlock(FIELDS, num_rows=2, num_workers=1)
    copy = pickle.loads(pickle.dumps(block))
    assert copy.fd != block.fd and copy.size == block.size
    block["big"][1, 3] = 42.0
    assert copy["big"][1, 3] == 42.0
    copy.close()
    block.close()


def test_close_keeps_existing_views_valid():
    block = SharedBlock(FIELDS, num_rows=2, num_workers=1)
    obs = block["obs"]
    block.close()
    block.close()  # idempotent
    assert block.closed
    obs[:] = 1.0  # still mapped
    assert obs.sum() == 2 * 15
    with pytest.raises(ValueError, match="closed"):
        block["obs"]
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(block)


def _run_workers(start_process, method, num_workers, rounds):
    """Workers started with `method` attach, read the main's rows, write theirs."""
    block = make_block(num_workers, inp_shape=(8,), inp_dtype=np.uint8)
    controller = block.controller()
    processes = start_job_workers(start_process, block, controller, num_workers,
                                  method=method)
    for round_ in range(1, rounds + 1):
        block["inp"][:] = (np.arange(num_workers * 8).reshape(num_workers, 8) * round_) % 251
        controller.post(range(num_workers), JobType.STEP, _workers.step_arg(round_))
        status, ids = controller.wait(num_workers, timeout_s=120)
        assert status == WaitStatus.OK and sorted(ids) == list(range(num_workers))
        np.testing.assert_array_equal(block["out"], block["inp"])
        assert (block["rec"][:, 1] == round_).all()
    close_workers(controller, processes)
    for process in processes:
        assert process.exitcode == 0
        process.close()  # releases its sentinel pipe now, not at garbage collection


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_see_the_same_bytes_and_nothing_leaks(start_process, method):
    # Helper processes that multiprocessing starts once and keeps (they hold
    # descriptors of their own in this process) are started before counting.
    resource_tracker.ensure_running()
    if method == "forkserver":
        forkserver.ensure_running()
    gc.collect()
    shm_before = shm_entries()
    fds_before = set(os.listdir("/proc/self/fd"))
    memfds_before = _memfd_count()

    _run_workers(start_process, method, num_workers=3, rounds=3)

    gc.collect()
    assert leaked_shm_entries(shm_before) == []  # other programs' entries aside
    assert _memfd_count() == memfds_before
    leaked = set(os.listdir("/proc/self/fd")) - fds_before
    assert not leaked, {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in leaked
                        if os.path.exists(f"/proc/self/fd/{fd}")}
