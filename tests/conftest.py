"""Test-wide fixtures: every test must leave no worker process and no /dev/shm entry
of its own (tests/support/shm_leaks.py tells its entries from other programs')."""

import os
import time
from typing import Iterator

import psutil
import pytest

# The shared test suites and helpers in tests/support assert too: show what failed
# (registered before the first of them is imported).
pytest.register_assert_rewrite("tests.support")

from tests.support.shm_leaks import leaked_shm_entries, shm_entries  # noqa: E402

# Helper processes multiprocessing keeps for the whole session by design.
_SESSION_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
_GRACE_SECONDS = 3.0


def _stray_children() -> list:
    strays = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            if any(helper in cmdline for helper in _SESSION_HELPERS):
                continue
            if child.status() == psutil.STATUS_ZOMBIE:
                # A zombie still counts: somebody forgot to join it.
                strays.append(f"{child.pid} (zombie)")
            else:
                strays.append(f"{child.pid} {cmdline[:120]}")
        except psutil.NoSuchProcess:
            continue
    return strays


@pytest.fixture(scope="session", autouse=True)
def sb3_log_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """stable-baselines3 makes a log folder for every model given none
    (``$TMPDIR/SB3-<time>``, kept after the run): the tests' go into pytest's
    own temporary directory ($SB3_LOGDIR, which child processes inherit)."""
    before = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3_logs"))
    yield
    if before is None:
        del os.environ["SB3_LOGDIR"]
    else:
        os.environ["SB3_LOGDIR"] = before


@pytest.fixture(autouse=True)
def no_leaked_workers_or_segments():
    """Asserts that a test leaves no child process and no /dev/shm entry of its own
    (new, lasting, and used by no process outside the test's)."""
    shm_before = shm_entries()
    yield
    deadline = time.monotonic() + _GRACE_SECONDS
    strays = _stray_children()
    while strays and time.monotonic() < deadline:
        time.sleep(0.05)
        strays = _stray_children()
    assert not strays, f"the test left worker processes behind: {strays}"
    new_shm = leaked_shm_entries(shm_before)
    assert not new_shm, f"the test left /dev/shm entries behind: {new_shm}"
