"""alf_env._penv._OpenMpPark: binds only to a loaded runtime, closes its region only on
the thread that opened it, and begin/end repeat safely."""

import threading

import pytest
import torch

from alf_env import _penv
from alf_env.data_plane.openmp import loaded_openmp_runtime


@pytest.fixture
def runtime() -> str:
    torch.ones(2) + 1  # torch is imported, so its OpenMP runtime is loaded
    path = loaded_openmp_runtime()
    assert path is not None
    return path


def test_a_runtime_that_is_not_loaded_is_refused_by_name(tmp_path):
    path = str(tmp_path / "libgomp.so.1")
    with pytest.raises(RuntimeError, match=f"OpenMP runtime {path} is not loaded"):
        _penv._OpenMpPark(path)


def test_begin_and_end_repeat_safely(runtime):
    park = _penv._OpenMpPark(runtime)
    park.end()  # not parked: nothing to do
    assert not park.parked
    for _ in range(3):
        park.begin()
        park.begin()  # already parked: nothing more
        assert park.parked
        park.end()
        park.end()
        assert not park.parked


def test_only_the_thread_that_parked_may_unpark(runtime):
    park = _penv._OpenMpPark(runtime)
    park.begin()
    errors = []

    def unpark() -> None:
        try:
            park.end()
        except RuntimeError as exc:
            errors.append(str(exc))

    other = threading.Thread(target=unpark)
    other.start()
    other.join(timeout=10)
    assert errors == ["OpenMpPark.end() called on another thread than begin()"]
    assert park.parked
    park.end()
    assert not park.parked


def test_torch_runs_on_the_parking_thread_while_parked(runtime):
    x = torch.randn(128, 128)
    expected = x @ x
    park = _penv._OpenMpPark(runtime)
    park.begin()
    try:
        inside = x @ x  # a nested region: this thread alone
    finally:
        park.end()
    torch.testing.assert_close(inside, expected)
    torch.testing.assert_close(x @ x, expected)
