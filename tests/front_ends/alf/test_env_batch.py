"""Several envs per worker in FastParallelEnvironment (alf_env.front_ends.alf.env_batch):
the same time steps as one env per worker and as the pipe path, per-env handles,
errors that name the env, and member resets that overlap the trainer."""

import functools
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from alf_env import nest
from alf_env.control_plane.affinity import usable_cpu_count
from alf_env.environments.fast_parallel_environment import FastParallelEnvironment, plan_group_size
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.environments.random_alf_environment import RandomAlfEnvironment
from alf_env.errors import WorkerDiedError
from alf_env.front_ends.alf.env_batch import AlfEnvBatch, MemberProxy, build_members
from tests.support.alf_envs import CountingEnv
from tests.support.alf_runs import assert_same_sequences, cartpole, random_env, run


@pytest.mark.parametrize("num_workers", [None, 1, 2, 3])
def test_groups_give_the_pipe_paths_time_steps(num_workers):
    ctors = [functools.partial(random_env, i) for i in range(6)]
    slow = run(ParallelAlfEnvironment, ctors, 250)
    fast = run(FastParallelEnvironment, ctors, 250, num_workers=num_workers)
    assert_same_sequences(slow, fast)
    assert sum(int(ts.is_last().sum()) for ts in fast) > 5  # episode ends are covered


def test_groups_of_cartpole_and_of_batched_envs_match():
    ctors = [functools.partial(cartpole, i) for i in range(4)]
    assert_same_sequences(run(ParallelAlfEnvironment, ctors, 300),
                          run(FastParallelEnvironment, ctors, 300, num_workers=2))
    batched = [functools.partial(random_env, i, batch_size=2) for i in range(4)]
    assert_same_sequences(run(ParallelAlfEnvironment, batched, 150),
                          run(FastParallelEnvironment, batched, 150, num_workers=2))


def test_zero_copy_groups_match_step_by_step():
    # zero_copy views are valid until the next step: compare at once.
    ctors = [functools.partial(cartpole, i) for i in range(4)]
    with ParallelAlfEnvironment(ctors) as slow, \
            FastParallelEnvironment(ctors, num_workers=2, zero_copy=True) as fast:
        slow.seed([1, 2, 3, 4])
        fast.seed([1, 2, 3, 4])
        assert_same_sequences([slow.reset()], [fast.reset()])
        generator = torch.Generator().manual_seed(0)
        ends = 0
        for _ in range(200):
            action = torch.randint(0, 2, (4,), generator=generator)
            expected = slow.step(action)
            assert_same_sequences([expected], [fast.step(action)])
            ends += int(expected.is_last().sum())
        assert ends >= 4


def test_default_is_about_one_worker_per_cpu():
    cpus = usable_cpu_count()
    n = 4 * cpus
    with FastParallelEnvironment([functools.partial(CountingEnv, env_id=i)
                                  for i in range(n)]) as env:
        assert env.num_workers == cpus
        assert len(env.worker_pids()) == cpus and len(env.envs) == n
        assert env.batch_size == n


def test_plan_group_size():
    assert plan_group_size(8, 2, 0, False) == 4
    assert plan_group_size(8, 8, 2, False) == 1
    assert plan_group_size(6, None, 1, False) == 1  # spares: one env per worker
    assert plan_group_size(6, None, 0, True) == 1   # blocking too
    cpus = usable_cpu_count()
    assert plan_group_size(cpus * 3, None, 0, False) == 3
    assert plan_group_size(1, None, 0, False) == 1
    with pytest.raises(ValueError, match=r"num_workers: expected a divisor of the number "
                                         r"of envs \(6\), got 4"):
        plan_group_size(6, 4, 0, False)
    with pytest.raises(ValueError, match="num_spare_envs_for_reload=1 needs one env per "
                                         "worker"):
        plan_group_size(6, 3, 1, False)


def test_envs_are_per_env_handles_that_forward_calls_and_attributes():
    ctors = [functools.partial(random_env, i) for i in range(4)]
    with FastParallelEnvironment(ctors, num_workers=2) as env:
        handles = env.envs
        assert [type(h) for h in handles] == [MemberProxy] * 4
        assert [h.env_id for h in handles] == [0, 1, 2, 3]
        pids = env.worker_pids()
        assert [h.pid for h in handles] == [pids[0], pids[0], pids[1], pids[1]]
        # A single-underscore attribute (the contract's RandomAlfEnvironment._rng).
        rngs = [h._rng for h in handles]
        assert isinstance(rngs[3], np.random.RandomState)
        assert rngs[0].randint(1 << 30) != rngs[1].randint(1 << 30)  # seeds 100, 101
        assert handles[2].call("observation_spec")() == env.observation_spec()
        assert handles[1].action_spec() == env.action_spec()  # a method, called remotely
        with pytest.raises(AttributeError):
            handles[0].__wrapped__  # noqa: B018 -- the access raises
        env.seed([5, 6, 7, 8])
        reference = RandomAlfEnvironment(env.observation_spec(), env.action_spec(), seed=1)
        reference.seed(7)
        assert handles[2]._rng.randint(1 << 30) == reference._rng.randint(1 << 30)
        assert env.call_envs_with_same_args("action_spec") == [env.action_spec()] * 4
        with pytest.raises(ValueError, match=r"seeds: expected 4 seeds \(one per env\), "
                                             r"got 2"):
            env.seed([1, 2])


def test_an_exception_names_the_env_of_the_group_that_raised_it():
    ctors = [functools.partial(CountingEnv, env_id=i) for i in range(4)]
    ctors[3] = functools.partial(CountingEnv, env_id=3, fault="raise", fault_phase="step",
                                 fault_step=2)
    with FastParallelEnvironment(ctors, num_workers=2) as env:
        env.reset()
        env.step(torch.zeros(4, dtype=torch.int64))
        with pytest.raises(ValueError, match="injected failure") as info:
            env.step(torch.zeros(4, dtype=torch.int64))
        text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
        assert "raised by env 3 during step" in text, text


def test_a_dead_worker_names_every_env_it_held():
    ctors = [functools.partial(CountingEnv, env_id=i) for i in range(4)]
    env = FastParallelEnvironment(ctors, num_workers=2)
    try:
        env.reset()
        os.kill(env.worker_pids()[1], signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match=r"envs \[2, 3\] died.*SIGKILL") as info:
            env.step(torch.zeros(4, dtype=torch.int64))
        assert info.value.env_ids == [2, 3]
        with pytest.raises(WorkerDiedError, match=r"envs \[2, 3\]"):
            env.step(torch.zeros(4, dtype=torch.int64))
    finally:
        env.close()


def test_a_member_resets_while_the_trainer_works():
    # Episodes of exactly 3 steps and a 1 s reset: the step after LAST finds
    # the reset done if the trainer spent that time elsewhere. (Without the
    # overlap it would take 2 s; a busy machine's step is far below 1 s.)
    reset_delay = 1.0
    ctors = [functools.partial(CountingEnv, env_id=i, min_length=3, max_length=3,
                               reset_delay=reset_delay) for i in range(2)]
    with FastParallelEnvironment(ctors, num_workers=1) as env:
        env.reset()
        action = torch.zeros(2, dtype=torch.int64)
        for _ in range(3):
            time_step = env.step(action)
        assert bool(time_step.is_last().all())
        time.sleep(2 * reset_delay + 0.3)  # the trainer's work
        begin = time.monotonic()
        time_step = env.step(action)
        assert time.monotonic() - begin < reset_delay  # both resets are done already
        assert bool(time_step.is_first().all())


def _leaf_bytes(time_step, spec):
    """What the rows hold of a time step (or of its leaves): each leaf's bytes
    in its spec's dtype (a flat reset's reward is the Python float 0.0)."""
    return [np.asarray(x, s.numpy_dtype).tobytes()
            for x, s in zip(nest.flatten(time_step), nest.flatten(spec))]


def _ended_group(seeds):
    """A group of two CartPole members (flat steps) stepped until member 0 returned
    ``LAST`` and reset early; the group, and a twin env of member 0 at that point."""
    group = AlfEnvBatch([functools.partial(cartpole, i) for i in range(2)], 0)
    twin = cartpole(0)
    group.seed_each(seeds)
    twin.seed(seeds[0])
    group.reset()
    twin.reset()
    views = [np.zeros((), np.int64)]
    while True:
        group.begin_job()
        leaves = [group.step_member_flat(j, views) for j in range(2)]
        assert all(x is not None for x in leaves)  # plain steps: flat
        if twin.step(np.int64(0)).is_last():
            break
        group.reset_ended()
    group.reset_ended()  # what the worker runs after the job: the early reset
    return group, twin


def test_a_member_that_ended_resets_early_through_its_flat_reset():
    group, twin = _ended_group([3, 4])
    try:
        expected = twin.step(np.int64(0))  # the step after LAST: a reset
        group.begin_job()
        first = group.step_member_flat(0, [np.zeros((), np.int64)])
        spec = twin.time_step_spec()
        assert type(first) is list and _leaf_bytes(first, spec) == _leaf_bytes(expected, spec)
        packed = group.members[0].current_time_step()
        assert _leaf_bytes(packed, spec) == _leaf_bytes(expected, spec)
        assert [np.asarray(x).dtype for x in nest.flatten(packed)] == [
            np.asarray(x).dtype for x in nest.flatten(expected)]
    finally:
        group.close()


def test_a_reset_or_seed_after_an_early_flat_reset_gives_that_first_or_resets_again():
    group, twin = _ended_group([3, 4])
    try:
        spec = twin.time_step_spec()
        assert _leaf_bytes(group.reset_member(0), spec) == _leaf_bytes(twin.reset(), spec)
        group.reset_ended()
    finally:
        group.close()
    group, twin = _ended_group([3, 4])
    try:
        group.seed_each([5, 6])  # the member reset early resets again, seeded
        twin.seed(5)
        expected = twin.reset()
        group.begin_job()
        spec = twin.time_step_spec()
        assert _leaf_bytes(group.step_member_flat(0, [np.zeros((), np.int64)]), spec) == \
            _leaf_bytes(expected, spec)
    finally:
        group.close()


def test_a_failed_member_reset_is_raised_by_the_next_step():
    group = AlfEnvBatch([functools.partial(CountingEnv, min_length=2, max_length=2),
                      functools.partial(CountingEnv, min_length=2, max_length=2,
                                        fault="raise")],
                     10)
    try:
        group.seed_each([1, 2])
        group.reset()
        group._members[1]._fault_phase = "reset"  # its next reset raises
        action = np.zeros(2, np.int64)
        group.step(action)
        assert bool(group.step(action).is_last().all())
        group.reset_ended()  # what the worker runs after the job
        with pytest.raises(ValueError, match="injected failure") as info:
            group.step(action)
        assert "raised by env 11 during reset" in "".join(info.value.__notes__)
    finally:
        group.close()


def test_members_with_other_specs_are_named_and_closed():
    closed = []

    class OtherSpec(CountingEnv):
        def observation_spec(self):
            from alf_env.tensor_specs import TensorSpec
            return TensorSpec((5,))

        def close(self):
            closed.append(self)
            super().close()

    with pytest.raises(ValueError, match=r"env group member 2: observation_spec is .*, but "
                                         r"env group member 0 has .*identical specs"):
        AlfEnvBatch([CountingEnv, CountingEnv, OtherSpec], 0)
    assert len(closed) == 1


class BuiltEnv(CountingEnv):
    """A CountingEnv whose constructor sleeps ``build_delay`` seconds (a slow
    simulator start) and notes the thread that built it."""

    def __init__(self, env_id: int = 0, build_delay: float = 0.0, **kwargs) -> None:
        time.sleep(build_delay)
        self.built_in_main_thread = threading.current_thread() is threading.main_thread()
        super().__init__(env_id=env_id, **kwargs)


# 10 constructors of 1 s on 2 workers: 5 s one after another, about 1 s side by
# side. Sleeping takes no CPU, so a busy machine stays far below the bound.
SLOW_BUILDS, BUILD_DELAY, BUILD_BOUND = 10, 1.0, 4.0


@pytest.mark.parametrize("num_workers", [2, None])
def test_start_serially_false_builds_the_members_of_a_worker_side_by_side(num_workers):
    ctors = [functools.partial(BuiltEnv, env_id=i, build_delay=BUILD_DELAY)
             for i in range(SLOW_BUILDS)]
    begin = time.monotonic()
    with FastParallelEnvironment(ctors, start_serially=False, blocking=False,
                                 num_workers=num_workers) as env:
        took = time.monotonic() - begin
        assert took < BUILD_BOUND, f"{SLOW_BUILDS} envs of {BUILD_DELAY} s took {took:.2f} s"
        if num_workers is None:
            assert env.num_workers == plan_workers(SLOW_BUILDS)
        first = env.reset()
        assert first.observation[:, 0].tolist() == list(range(SLOW_BUILDS))  # row i is env i
        if env.num_workers < SLOW_BUILDS:
            assert [h.built_in_main_thread for h in env.envs] == [False] * SLOW_BUILDS


def plan_workers(num_envs: int) -> int:
    return num_envs // plan_group_size(num_envs, None, 0, False)


def test_start_serially_builds_the_members_one_after_another_in_the_main_thread():
    ctors = [functools.partial(BuiltEnv, env_id=i) for i in range(4)]
    with FastParallelEnvironment(ctors, num_workers=2) as env:
        assert [h.built_in_main_thread for h in env.envs] == [True] * 4
        assert env.reset().observation[:, 0].tolist() == [0, 1, 2, 3]


class ClosedEnv(BuiltEnv):
    closed: list = []

    def close(self):
        ClosedEnv.closed.append(self._env_id)
        super().close()


@pytest.mark.parametrize("concurrently", [True, False])
def test_a_failed_member_build_closes_the_members_built_and_raises_the_first_error(
        concurrently):
    ClosedEnv.closed = []
    ctors = [ClosedEnv] * 4
    ctors[1] = functools.partial(ClosedEnv, fault="raise", fault_phase="ctor")
    ctors[3] = functools.partial(ClosedEnv, fault="unknown", fault_phase="ctor")
    with pytest.raises(ValueError, match="injected failure"):
        build_members(ctors, 10, concurrently)
    # Member 1 raised (member 3's AssertionError comes later in order); the
    # members built (0, and 2 when built side by side) are closed.
    assert sorted(ClosedEnv.closed) == ([10, 12] if concurrently else [10])
    members = build_members([functools.partial(BuiltEnv)] * 3, 5, concurrently)
    assert [m._env_id for m in members] == [5, 6, 7]
    assert [m.built_in_main_thread for m in members] == [not concurrently] * 3
