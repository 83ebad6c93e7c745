"""Tests of alf_env.control_plane.restart: the policy, the budget and its log line."""

import logging
import signal

import pytest

from alf_env.control_plane.restart import (
    RESTARTED_INFO_KEY,
    RestartBudget,
    RestartPolicy,
    describe_death,
)
from alf_env.errors import WorkerDiedError


@pytest.fixture
def warnings(caplog):
    """The warnings logged through absl (the restart line)."""
    caplog.set_level(logging.WARNING, logger="absl")

    def lines():
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return lines


def test_without_a_policy_no_restart_is_allowed():
    budget = RestartBudget(None, 2)
    assert not budget.enabled
    assert not budget.allows(0) and not budget.allows(1)


def test_the_budget_counts_each_worker_apart_up_to_the_limit(warnings):
    budget = RestartBudget(RestartPolicy(max_restarts=2), 3)
    assert budget.enabled
    assert budget.spend(1, [2, 3], "killed by SIGKILL (signal 9)") == 1
    assert budget.allows(1)
    assert budget.spend(1, [2, 3], "killed by SIGKILL (signal 9)") == 2
    assert not budget.allows(1)  # the third death of worker 1 is raised
    assert budget.allows(0) and budget.allows(2)  # the others keep their own
    assert budget.counts == [0, 2, 0]


def test_an_unlimited_policy_always_allows():
    budget = RestartBudget(RestartPolicy(max_restarts=None), 1)
    for _ in range(50):
        budget.spend(0, [0], "exited with code 3")
    assert budget.allows(0)
    assert budget.counts == [50]


def test_max_restarts_zero_allows_none():
    assert not RestartBudget(RestartPolicy(max_restarts=0), 1).allows(0)


def test_each_restart_logs_one_line_naming_the_envs_the_cause_and_the_count(warnings):
    budget = RestartBudget(RestartPolicy(max_restarts=3), 2)
    budget.spend(1, [2, 3], "killed by SIGSEGV (signal 11)")
    assert warnings() == ["envs [2, 3] (worker 1) died: killed by SIGSEGV (signal 11); "
                          "restarting them (restart 1 of 3)"]
    RestartBudget(RestartPolicy(max_restarts=None), 1).spend(0, [0], "exited with code 3")
    assert warnings()[-1] == ("envs [0] (worker 0) died: exited with code 3; restarting "
                              "them (restart 1)")
    assert len(warnings()) == 2


def test_start_timeout_is_the_policys():
    assert RestartBudget(RestartPolicy(start_timeout=7.5), 1).start_timeout == 7.5


@pytest.mark.parametrize("policy", [3, "yes", {"max_restarts": 3}, True])
def test_a_policy_of_another_type_is_refused_naming_the_argument(policy):
    with pytest.raises(TypeError, match=rf"restart_policy: expected None or a "
                                        rf"RestartPolicy, got {type(policy).__name__}"):
        RestartBudget(policy, 1)


@pytest.mark.parametrize("kwargs,match", [
    ({"max_restarts": -1}, "max_restarts: expected None or >= 0, got -1"),
    ({"start_timeout": 0}, "start_timeout: expected a positive number of seconds, got 0"),
])
def test_bad_policy_values_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RestartPolicy(**kwargs)


def test_describe_death_gives_the_signal_or_the_exit_code():
    assert describe_death(WorkerDiedError(2, -signal.SIGKILL)) == "killed by SIGKILL (signal 9)"
    assert describe_death(WorkerDiedError(2, 3)) == "exited with code 3"
    assert describe_death(RuntimeError("node lost")) == "RuntimeError: node lost"


def test_the_ray_front_end_reexports_the_one_policy_class():
    from alf_env.front_ends.ray.restart import RestartPolicy as RayRestartPolicy
    assert RayRestartPolicy is RestartPolicy
    assert RESTARTED_INFO_KEY == "env_restarted"
