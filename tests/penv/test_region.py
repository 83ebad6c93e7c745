"""SharedRegion: memfd + mmap(MAP_SHARED), attach by fd, buffer protocol."""

import errno
import gc
import os

import numpy as np
import pytest

from alf_env import _penv
from tests.support.shm_leaks import leaked_shm_entries, shm_entries


def _fd_target(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def test_create_gives_zeroed_writable_uint8_buffer():
    region = _penv.SharedRegion(4096 + 3)
    assert region.size == 4096 + 3
    assert len(region) == 4096 + 3
    view = memoryview(region)
    assert view.format == "B" and view.ndim == 1 and not view.readonly
    array = np.frombuffer(region, dtype=np.uint8)
    assert array.shape == (4099,)
    assert not array.any()
    array[:] = 7
    assert bytes(memoryview(region)[:4]) == b"\x07" * 4


def test_region_is_a_memfd_and_not_in_dev_shm():
    before = shm_entries()
    region = _penv.SharedRegion(1 << 16)
    assert _fd_target(region.fd).startswith("/memfd:")
    assert leaked_shm_entries(before) == []  # other programs' entries aside
    # close-on-exec: never leaks into exec()ed programs
    import fcntl
    assert fcntl.fcntl(region.fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC


def test_attach_maps_the_same_memory():
    region = _penv.SharedRegion(256)
    other = _penv.SharedRegion.attach(region.fd, region.size)
    assert other.fd != region.fd  # attach keeps its own duplicate
    a = np.frombuffer(region, dtype=np.uint8)
    b = np.frombuffer(other, dtype=np.uint8)
    a[10] = 42
    assert b[10] == 42
    b[255] = 9
    assert a[255] == 9


def test_attach_does_not_take_ownership_of_the_callers_fd():
    region = _penv.SharedRegion(128)
    fd = os.dup(region.fd)
    other = _penv.SharedRegion.attach(fd, 128)
    os.close(fd)  # ours to close; the attached region keeps working
    np.frombuffer(other, dtype=np.uint8)[0] = 1
    assert np.frombuffer(region, dtype=np.uint8)[0] == 1


def test_attach_with_wrong_size_says_expected_and_got():
    region = _penv.SharedRegion(128)
    with pytest.raises(ValueError, match=r"expected a memory file of 64 bytes, got one of 128"):
        _penv.SharedRegion.attach(region.fd, 64)


def test_attach_to_a_closed_fd_raises_oserror_with_errno():
    fd = os.open("/dev/null", os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError, match="Bad file descriptor") as info:
        _penv.SharedRegion.attach(fd, 64)
    assert info.value.errno == errno.EBADF


def test_attach_to_a_non_regular_file_is_refused():
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(ValueError, match="not a regular file"):
            _penv.SharedRegion.attach(read_end, 64)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_zero_size_is_rejected():
    with pytest.raises(ValueError, match="size must be > 0"):
        _penv.SharedRegion(0)


def test_size_is_sealed_against_truncation():
    region = _penv.SharedRegion(8192)
    with pytest.raises(PermissionError):
        os.ftruncate(region.fd, 4096)
    with pytest.raises(PermissionError):
        os.ftruncate(region.fd, 1 << 20)


def test_mapping_outlives_the_region_object_while_views_exist():
    region = _penv.SharedRegion(4096)
    fd = region.fd
    view = np.frombuffer(region, dtype=np.uint8)
    del region
    gc.collect()
    view[:] = 3  # still mapped: the view keeps the region alive
    assert view.sum() == 3 * 4096
    assert _fd_target(fd).startswith("/memfd:")
    del view
    gc.collect()
    with pytest.raises(FileNotFoundError):
        os.readlink(f"/proc/self/fd/{fd}")  # fd closed, mapping gone


def test_child_process_sees_parent_writes_and_vice_versa():
    region = _penv.SharedRegion(64)
    data = np.frombuffer(region, dtype=np.uint8)
    data[0] = 11
    pid = os.fork()
    if pid == 0:  # child: inherits the mapping
        try:
            ok = data[0] == 11
            data[1] = 22 if ok else 99
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert data[1] == 22
