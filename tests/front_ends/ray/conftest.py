"""Ray for the distributed tests: one local instance (or two-node cluster) per
module, and the leak check of tests/conftest.py made aware of Ray's own
processes (which live for the whole module by design)."""

import pytest

from tests.support.ray import (
    RAY_INIT,
    assert_no_children,
    environment_for_workers,
    restore_environment,
    wait_no_strays,
)
from tests.support.shm_leaks import leaked_shm_entries, shm_entries


@pytest.fixture(autouse=True)
def no_leaked_workers_or_segments():
    """Overrides the suite-wide check: no actor, no env worker and no new
    /dev/shm entry may outlive a test (Ray's daemons may)."""
    shm_before = shm_entries()
    yield
    left = wait_no_strays()
    assert not left, f"the test left actors or env workers behind: {left}"
    new_shm = leaked_shm_entries(shm_before)  # other programs' entries aside
    assert not new_shm, f"the test left /dev/shm entries behind: {new_shm}"


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray instance with 2 CPUs for the whole module, shut down at its end."""
    import ray
    old = environment_for_workers()
    ray.init(num_cpus=2, **RAY_INIT)
    try:
        yield ray
    finally:
        ray.shutdown()
        restore_environment(old)
    assert_no_children("ray.shutdown()")


@pytest.fixture(scope="module")
def ray_cluster():
    """A two-node ``ray.cluster_utils.Cluster`` (1 CPU each) on this machine,
    with fast node-death detection (health checks every 0.5 s, 3 misses)."""
    import ray
    from ray.cluster_utils import Cluster
    old = environment_for_workers()
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
        restore_environment(old)
    assert_no_children("Cluster.shutdown()")
