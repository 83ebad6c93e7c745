"""RayVectorEnv on a two-node ``ray.cluster_utils.Cluster`` (both nodes on this
machine): actors spread over the nodes, and a node that is removed."""

import time

import gymnasium as gym
import numpy as np
import pytest

from alf_env.distributed import ActorDiedError, RayVectorEnv, RestartPolicy
from tests.support.gym_envs import assert_tree_equal, info_env

PROMPT_SECONDS = 30.0  # node death: Ray's health checks (0.5 s x 3 here) + slack
# One CPU per actor on nodes of one CPU each: Ray must put one actor on each node.
ONE_PER_NODE = {"num_cpus": 1}


def pinned(ray, head_id, second_id):
    """Actor 0 on the head node, actor 1 on the second node (zero CPUs each)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return [{"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(
                node_id, soft=False)} for node_id in (head_id, second_id)]


@pytest.fixture
def second_node(ray_cluster):
    """The cluster's second node (added again if an earlier test removed it), the
    actor options that pin actor 1 to it, and its Ray node id."""
    ray, cluster, _ = ray_cluster
    nodes = list(cluster.worker_nodes)
    if not nodes:
        nodes = [cluster.add_node(num_cpus=1, resources={"second_node": 1},
                                  object_store_memory=100 * 1024 * 1024)]
        cluster.wait_for_nodes()
    alive = [n for n in ray.nodes() if n["Alive"]]
    [second_id] = [n["NodeID"] for n in alive if "second_node" in n["Resources"]]
    [head_id] = [n["NodeID"] for n in alive if "second_node" not in n["Resources"]]
    return cluster, nodes[0], pinned(ray, head_id, second_id), second_id


def test_actors_spread_over_the_nodes_and_match_sync_vector_env(second_node):
    fns = [info_env] * 4
    ref = gym.vector.SyncVectorEnv(fns)
    with RayVectorEnv(fns, num_actors=2, actor_options=ONE_PER_NODE) as env:
        assert len({a["node_id"] for a in env.actor_info()}) == 2
        assert_tree_equal(env.reset(seed=5), ref.reset(seed=5))
        ref.action_space.seed(0)
        for t in range(200):
            actions = ref.action_space.sample()
            assert_tree_equal(env.step(actions), ref.step(actions), f"step {t}")
    ref.close()


def test_removed_node_raises_actor_died_error_naming_its_envs(second_node):
    cluster, node, options, second_id = second_node
    env = RayVectorEnv([info_env] * 4, num_actors=2, actor_options=options)
    try:
        env.reset(seed=0)
        assert env.actor_info()[1]["node_id"] == second_id
        cluster.remove_node(node, allow_graceful=False)
        begin = time.monotonic()
        with pytest.raises(ActorDiedError, match=r"actor 1 .*envs \[2, 3\]") as info:
            for _ in range(100_000):  # until Ray notices that the node is gone
                env.step(env.action_space.sample())
        assert time.monotonic() - begin < PROMPT_SECONDS
        assert info.value.env_ids == [2, 3]
    finally:
        env.close()


def test_removed_node_with_restart_policy_moves_the_envs(second_node):
    cluster, node, options, second_id = second_node
    env = RayVectorEnv([info_env] * 4, num_actors=2, actor_options=options,
                       restart_policy=RestartPolicy(max_restarts=1, start_timeout=60,
                                                    actor_options={"num_cpus": 0}))
    try:
        env.reset(seed=0)
        assert env.actor_info()[1]["node_id"] == second_id
        cluster.remove_node(node, allow_graceful=False)
        begin = time.monotonic()
        for _ in range(100_000):
            *_, truncated, info = env.step(env.action_space.sample())
            if "env_restarted" in info:
                break
        assert time.monotonic() - begin < PROMPT_SECONDS
        assert np.flatnonzero(info["env_restarted"]).tolist() == [2, 3]
        assert truncated[2:].all()
        assert env.actor_info()[1]["node_id"] not in ("", second_id)  # moved: no pin now
        for _ in range(5):
            env.step(env.action_space.sample())
    finally:
        env.close()
