"""Helpers of the Ray front end's tests: the ``ray.init`` settings of the test
instances, stray-process checks that know Ray's own daemons, and ``kill_actor``.
The fixtures that use them are in tests/front_ends/ray/conftest.py."""

import os
import time

import psutil

from tests.support.paths import REPO_ROOT

# Ray's own long-lived processes (daemons and pooled idle workers).
_RAY_DAEMONS = ("gcs_server", "raylet", "ray/autoscaler", "ray/dashboard", "log_monitor",
                "ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::IDLE",
                "multiprocessing.forkserver", "multiprocessing.resource_tracker")
_MP_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
_GRACE_SECONDS = 15.0  # Ray reaps killed actors asynchronously
#: ``ray.init`` arguments of the test instances (small object store: a shared machine).
RAY_INIT = dict(include_dashboard=False, object_store_memory=100 * 1024 * 1024,
                log_to_driver=False)


#: pids of module-scoped envs (their actors and env workers), which outlive tests.
KEEP_PIDS: set = set()


def strays() -> list:
    """Child processes that are neither Ray's daemons nor its idle workers
    (nor in :data:`KEEP_PIDS`)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in KEEP_PIDS:
            continue
        try:
            cmdline = " ".join(child.cmdline())
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(f"{child.pid} (zombie)")
            elif not any(d in cmdline for d in _RAY_DAEMONS):
                found.append(f"{child.pid} {cmdline[:100]}")
        except psutil.NoSuchProcess:
            continue
    return found


def wait_no_strays(grace: float = _GRACE_SECONDS) -> list:
    deadline = time.monotonic() + grace
    found = strays()
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = strays()
    return found


def assert_no_children(after: str) -> None:
    """Asserts that no child process at all is left (after Ray is shut down)."""
    def children():
        return [p for p in psutil.Process().children(recursive=True)
                if not any(h in " ".join(_cmdline(p)) for h in _MP_HELPERS)]
    deadline = time.monotonic() + _GRACE_SECONDS
    left = children()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = children()
    if left:
        # Reported below, but not left to the rest of the suite: every later
        # test's leak check would fail on them.
        for process in left:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=5.0)
    assert not left, f"{after} left processes behind: {left}"


def _cmdline(process: psutil.Process) -> list:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


#: What the test instances' workers get in their environment: ``tests.*`` on
#: their path (the test envs), and the priority of the tests' other processes.
#: Ray starts its workers at niceness 15 by default, and beside busy processes
#: (the suite must pass on a busy machine) they got so little CPU that restarts
#: took minutes and nodes missed their heartbeats.
_WORKER_NICENESS = "RAY_worker_niceness"


def environment_for_workers() -> dict:
    """Sets what Ray workers inherit (see above); returns the old values."""
    old = {name: os.environ.get(name) for name in ("PYTHONPATH", _WORKER_NICENESS)}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                             old["PYTHONPATH"]]))
    os.environ[_WORKER_NICENESS] = "0"
    return old


def restore_environment(old: dict) -> None:
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def kill_actor(ray, handle, timeout: float = 30.0) -> None:
    """``ray.kill(handle)`` and wait until Ray reports the actor dead (the kill
    is asynchronous: a call sent right after it could still run)."""
    ray.kill(handle)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(handle.ping.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"Ray did not report the killed actor dead within {timeout} s")
