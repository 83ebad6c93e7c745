"""Ray for the distributed tests: one local instance (or two-node cluster) per
module, and the leak check of tests/conftest.py made aware of Ray's own
processes (which live for the whole module by design)."""

import os
import time

import psutil
import pytest

from tests.support.paths import REPO_ROOT  # noqa: E402
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


@pytest.fixture(autouse=True)
def no_leaked_workers_or_segments():
    """Overrides the suite-wide check: no actor, no env worker and no new
    /dev/shm entry may outlive a test (Ray's daemons may)."""
    shm_before = set(os.listdir("/dev/shm"))
    yield
    left = wait_no_strays()
    assert not left, f"the test left actors or env workers behind: {left}"
    new_shm = set(os.listdir("/dev/shm")) - shm_before
    assert not new_shm, f"the test left /dev/shm entries behind: {sorted(new_shm)}"


def _python_path_for_workers():
    """Ray workers must import ``tests.*`` (the test envs): they inherit PYTHONPATH."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), old]))
    return old


def _restore_python_path(old):
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray instance with 2 CPUs for the whole module, shut down at its end."""
    import ray
    old = _python_path_for_workers()
    ray.init(num_cpus=2, **RAY_INIT)
    try:
        yield ray
    finally:
        ray.shutdown()
        _restore_python_path(old)
    assert_no_children("ray.shutdown()")


@pytest.fixture(scope="module")
def ray_cluster():
    """A two-node ``ray.cluster_utils.Cluster`` (1 CPU each) on this machine,
    with fast node-death detection (health checks every 0.5 s, 3 misses)."""
    import ray
    from ray.cluster_utils import Cluster
    old = _python_path_for_workers()
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, object_store_memory=RAY_INIT["object_store_memory"],
        include_dashboard=False,
        _system_config={"health_check_initial_delay_ms": 0,
                        "health_check_period_ms": 500,
                        "health_check_failure_threshold": 3}))
    try:
        worker = cluster.add_node(num_cpus=1, resources={"second_node": 1},
                                  object_store_memory=RAY_INIT["object_store_memory"])
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        yield ray, cluster, worker
    finally:
        ray.shutdown()
        cluster.shutdown()
        _restore_python_path(old)
    assert_no_children("Cluster.shutdown()")


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
