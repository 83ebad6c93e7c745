"""The contract suite of the batched envs, run on every backend.

ParallelAlfEnvironment (pipes) and FastParallelEnvironment (shared memory) are
both compared value by value to stepping the same envs in this process.
"""

import functools
import time

import numpy as np
import pytest
import torch

from alf_env.data_structures import StepType
from alf_env.environments.alf_wrappers import BatchEnvironmentWrapper
from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.parallel_environment import ParallelAlfEnvironment
from alf_env.errors import EnvironmentClosedError, WorkerDiedError
from tests.support.alf_envs import CountingEnv
from tests.support.alf_runs import InProcessReference, assert_rows_equal, random_actions

PROMPT = 5.0


def counting_ctors(n, **kwargs):
    return [functools.partial(CountingEnv, env_id=i, **kwargs) for i in range(n)]



@pytest.fixture(params=[ParallelAlfEnvironment, FastParallelEnvironment],
                ids=["pipes", "fast"])
def backend(request):
    return request.param


@pytest.fixture
def make_parallel(backend):
    created = []

    def make(ctors, **kwargs):
        env = backend(ctors, **kwargs)
        created.append(env)
        return env

    yield make
    for env in created:
        env.close()


@pytest.mark.parametrize("flatten", [True, False])
def test_batched_time_step_types_and_shapes(make_parallel, flatten):
    env = make_parallel(counting_ctors(3), flatten=flatten)
    first = env.reset()
    assert env.batched and env.batch_size == 3
    for ts in (first, env.step(torch.ones(3, dtype=torch.int64))):
        assert ts.observation.shape == (3, 4) and ts.observation.dtype == torch.float32
        assert ts.step_type.dtype == torch.int32 and ts.env_id.dtype == torch.int32
        assert ts.reward.dtype == torch.float32 and ts.discount.dtype == torch.float32
        assert ts.prev_action.dtype == torch.int64 and ts.prev_action.shape == (3,)
        assert ts.reward.shape == ts.discount.shape == ts.step_type.shape == (3,)
    assert bool((first.step_type == StepType.FIRST).all())
    np.testing.assert_array_equal(ts.env_id.numpy(), [0, 1, 2])
    assert env.observation_spec() == CountingEnv().observation_spec()
    assert env.action_spec() == CountingEnv().action_spec()
    assert env.time_step_spec() == CountingEnv().time_step_spec()


@pytest.mark.parametrize("flatten", [True, False])
@pytest.mark.parametrize("start_serially", [True, False])
@pytest.mark.parametrize("blocking", [False, True])
def test_matches_in_process_stepping(make_parallel, flatten, start_serially, blocking):
    n, steps = 3, 200
    env = make_parallel(counting_ctors(n), flatten=flatten,
                        start_serially=start_serially, blocking=blocking)
    ref = InProcessReference([CountingEnv(env_id=i) for i in range(n)])
    assert_rows_equal(env.reset(), ref.reset())
    ended = 0
    for action in random_actions(steps, n):
        ts = env.step(action)
        assert_rows_equal(ts, ref.step(action))
        ended += int(ts.is_last().sum())
    assert ended > 20  # auto-reset really happened many times


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_spawn_and_forkserver(make_parallel, start_method):
    env = make_parallel([lambda env_id: CountingEnv(env_id=env_id)] * 2,
                        start_method=start_method, start_serially=False)
    ref = InProcessReference([CountingEnv(env_id=i) for i in range(2)])
    assert_rows_equal(env.reset(), ref.reset())
    for action in random_actions(30, 2):
        assert_rows_equal(env.step(action), ref.step(action))


def test_batched_envs_in_workers(make_parallel):
    per_env = 2

    def batch_ctor(env_id):
        return BatchEnvironmentWrapper(
            [CountingEnv(env_id=env_id * per_env + j) for j in range(per_env)])

    env = make_parallel([batch_ctor] * 3)
    assert env.batch_size == 6
    ref = InProcessReference([CountingEnv(env_id=i) for i in range(6)])
    assert_rows_equal(env.reset(), ref.reset())
    for action in random_actions(100, 6):
        assert_rows_equal(env.step(action), ref.step(action))


def test_spare_envs_take_over_after_last(make_parallel):
    n, spares = 5, 2
    env = make_parallel(counting_ctors(n), num_spare_envs_for_reload=spares)
    assert env.batch_size == n - spares
    assert len(env.worker_pids()) == n
    ref = InProcessReference([CountingEnv(env_id=i) for i in range(n)], num_spares=spares)
    assert_rows_equal(env.reset(), ref.reset())
    producers = set()
    prev = None
    for action in random_actions(150, n - spares):
        ts = env.step(action)
        assert_rows_equal(ts, ref.step(action))
        producers.update(int(x) for x in ts.observation[:, 0])
        if prev is not None:
            # The step after LAST is always a FIRST, from the spare that took over.
            assert bool((ts.is_first() == prev.is_last()).all())
        prev = ts
    assert producers == set(range(n))  # every spare served a slot


def test_spares_hide_slow_resets(make_parallel):
    # Resets take 1 s; episodes 20 steps. Once the spares' own first resets
    # are done, the two slots' episode ends (step 20) cost the batch nothing:
    # the spares take over at once. A stall would cost a whole reset, so the
    # bound leaves the 21 steps of a busy machine most of a second.
    reset_delay = 1.0
    ctors = counting_ctors(4, reset_delay=reset_delay, min_length=20, max_length=20)
    env = make_parallel(ctors, num_spare_envs_for_reload=2, start_serially=False)
    env.reset()
    time.sleep(reset_delay + 0.3)  # the trainer's work, while the spares reset
    begin = time.monotonic()
    for action in random_actions(21, 2):
        time_step = env.step(action)
    assert time.monotonic() - begin < reset_delay
    assert bool(time_step.is_first().all())  # the spares' FIRST steps


def test_spares_need_unbatched_envs(backend):
    def batch_ctor():
        return BatchEnvironmentWrapper([CountingEnv(), CountingEnv(env_id=1)])

    with pytest.raises(ValueError, match="num_spare_envs_for_reload"):
        backend([batch_ctor] * 2, num_spare_envs_for_reload=1)


def test_invalid_arguments(backend):
    with pytest.raises(ValueError, match="env_constructors"):
        backend([])
    with pytest.raises(ValueError, match="num_spare_envs_for_reload"):
        backend(counting_ctors(2), num_spare_envs_for_reload=2)


def test_seed_makes_runs_reproducible(make_parallel):
    def run(seeds):
        env = make_parallel(counting_ctors(3))
        env.seed(seeds)
        out = [env.reset().observation.clone()]
        out += [env.step(a).observation.clone() for a in random_actions(40, 3)]
        env.close()
        return torch.stack(out)

    a, b, c = run([5, 6, 7]), run([5, 6, 7]), run([8, 9, 10])
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_seed_needs_one_seed_per_env(make_parallel):
    env = make_parallel(counting_ctors(3), num_spare_envs_for_reload=1)
    with pytest.raises(ValueError, match="expected 3 seeds"):
        env.seed([1, 2])


def test_call_render_and_pids(make_parallel):
    env = make_parallel(counting_ctors(3))
    assert env.call_envs_with_same_args("observation_spec") == \
        [CountingEnv().observation_spec()] * 3
    assert env.render("rgb_array").shape == (2, 2, 3)
    pids = env.worker_pids()
    assert len(set(pids)) == 3 and all(isinstance(p, int) for p in pids)
    assert [e.env_id for e in env.envs] == [0, 1, 2]


def test_specs_must_match(backend):
    class OtherSpec(CountingEnv):
        def observation_spec(self):
            from alf_env.tensor_specs import TensorSpec
            return TensorSpec((5,))

    ctors = [CountingEnv, CountingEnv, OtherSpec]
    with pytest.raises(ValueError, match="env 2: observation_spec"):
        backend(ctors)


def test_constructor_failure_closes_every_worker(backend):
    ctors = counting_ctors(3)
    ctors[1] = functools.partial(CountingEnv, env_id=1, fault="raise", fault_phase="ctor")
    with pytest.raises(ValueError, match="injected failure"):
        backend(ctors, start_serially=False)
    # The autouse fixture checks that no worker is left.


@pytest.mark.parametrize("phase", ["reset", "step"])
def test_exception_in_reset_or_step_keeps_type(make_parallel, phase):
    ctors = counting_ctors(3)
    ctors[2] = functools.partial(CountingEnv, env_id=2, fault="raise", fault_phase=phase)
    env = make_parallel(ctors)
    with pytest.raises(ValueError, match="injected failure") as info:
        env.reset()
        for action in random_actions(10, 3):
            env.step(action)
    assert info.value.__cause__.env_id == 2
    assert f"_{phase}" in info.value.__cause__.remote_traceback


def test_worker_death_during_step(make_parallel):
    ctors = counting_ctors(3)
    ctors[1] = functools.partial(CountingEnv, env_id=1, fault="sigkill", fault_phase="step")
    env = make_parallel(ctors)
    env.reset()
    begin = time.monotonic()
    with pytest.raises(WorkerDiedError, match="env 1.*SIGKILL"):
        for action in random_actions(10, 3):
            env.step(action)
    assert time.monotonic() - begin < PROMPT
    env.close()


@pytest.mark.parametrize("bad_action,match", [
    (torch.zeros(4, dtype=torch.int64), r"action: expected shape \(3,\)"),
    (torch.zeros((3, 1), dtype=torch.int64), r"action: expected shape \(3,\)"),
    (torch.zeros(3, dtype=torch.float32), "action: expected dtype int64"),
    ((torch.zeros(3, dtype=torch.int64),), "action: its nest structure"),
])
def test_bad_action_is_rejected_and_env_stays_usable(make_parallel, bad_action, match):
    env = make_parallel(counting_ctors(3))
    ref = InProcessReference([CountingEnv(env_id=i) for i in range(3)])
    env.reset(), ref.reset()
    actions = random_actions(20, 3)
    for i, action in enumerate(actions):
        if i == 5:
            with pytest.raises(ValueError, match=match):
                env.step(bad_action)
        assert_rows_equal(env.step(action), ref.step(action))


def test_safe_casts_and_non_contiguous_actions_are_accepted(make_parallel):
    env = make_parallel(counting_ctors(3))
    env.reset()
    wide = torch.tensor([[1, 9], [2, 9], [3, 9]], dtype=torch.int32)[:, 0]  # strided
    assert not wide.is_contiguous()
    ts = env.step(wide)
    np.testing.assert_array_equal(ts.prev_action.numpy(), [1, 2, 3])
    ts = env.step(np.array([0, 1, 2], dtype=np.uint8))
    np.testing.assert_array_equal(ts.observation[:, 3].numpy(), [0, 1, 2])
    # The rows' own dtype, strided: written as it is, by one native copy.
    exact = torch.tensor([[2, 9], [0, 9], [1, 9]], dtype=torch.int64)[:, 0]
    assert not exact.is_contiguous()
    ts = env.step(exact)
    np.testing.assert_array_equal(ts.prev_action.numpy(), [2, 0, 1])


def test_closed_env_raises_and_close_is_idempotent(backend):
    env = backend(counting_ctors(2))
    env.reset()
    env.close()
    env.close()
    with pytest.raises(EnvironmentClosedError):
        env.step(torch.zeros(2, dtype=torch.int64))
    with pytest.raises(EnvironmentClosedError):
        env.reset()


def test_context_manager_closes(backend):
    with backend(counting_ctors(2)) as env:
        env.reset()
        pids = env.worker_pids()
    import psutil
    assert not any(psutil.pid_exists(p) for p in pids)


# -- ALF behaviours kept ---------------------------------------------------------


def test_is_tensor_based_as_in_alf(make_parallel):
    env = make_parallel(counting_ctors(2))
    assert env.is_tensor_based is True  # time steps are torch tensors
    assert isinstance(env.reset().observation, torch.Tensor)


RESET_DELAY = 0.5


def test_reset_after_last_runs_in_the_background_as_in_alf(make_parallel):
    """ALF starts an ended env's reset at once (no spares): the next step does
    not wait for it when the trainer spent that time elsewhere. The time steps
    are those of resetting on the step after LAST."""
    n = 2
    ctors = counting_ctors(n, reset_delay=RESET_DELAY, min_length=3, max_length=3)
    env = make_parallel(ctors, start_serially=False)
    ref = InProcessReference([CountingEnv(env_id=i, min_length=3, max_length=3)
                              for i in range(n)])
    assert_rows_equal(env.reset(), ref.reset())
    fast_steps = []
    for action in random_actions(6, n):
        ts = env.step(action)
        assert_rows_equal(ts, ref.step(action))
        if bool(ts.is_last().all()):
            time.sleep(RESET_DELAY + 0.3)  # the trainer trains meanwhile
            begin = time.monotonic()
            after = env.step(action)
            fast_steps.append(time.monotonic() - begin)
            assert_rows_equal(after, ref.step(action))
            assert bool(after.is_first().all())
    assert len(fast_steps) == 2
    # Resetting on this step would take RESET_DELAY; generous for a noisy machine.
    assert max(fast_steps) < RESET_DELAY / 2, fast_steps


def test_reset_of_the_batch_after_last_does_not_reset_twice(make_parallel):
    n = 3
    env = make_parallel(counting_ctors(n, min_length=2, max_length=2))
    ref = InProcessReference([CountingEnv(env_id=i, min_length=2, max_length=2)
                              for i in range(n)])
    assert_rows_equal(env.reset(), ref.reset())
    for action in random_actions(2, n):
        assert bool(env.step(action).is_last().all()) is bool(ref.step(action)[0].is_last())
    # observation[2] counts the env's resets: one, as without background resets.
    assert_rows_equal(env.reset(), ref.reset())
    for action in random_actions(5, n, seed=1):
        assert_rows_equal(env.step(action), ref.step(action))


def test_seed_after_last_applies_to_the_next_episode(make_parallel):
    """A seed given after LAST applies to the reset that follows (the one already
    under way is started again), as it does when the step after LAST resets."""
    from alf_env.environments import suite_gym

    def cartpole(env_id):
        return suite_gym.load("CartPole-v1", env_id=env_id, max_episode_steps=2)

    def assert_seeded_first_steps(time_step, seeds):
        for i, seed in enumerate(seeds):
            expected = cartpole(i)
            expected.seed(seed)
            np.testing.assert_array_equal(time_step.observation[i].numpy(),
                                          expected.reset().observation)
            expected.close()

    env = make_parallel([cartpole] * 2)
    env.reset()
    actions = torch.zeros(2, dtype=torch.int64)
    for seeds, restart in (([11, 12], lambda: env.step(actions)),
                           ([13, 14], env.reset)):  # the step after LAST, or reset()
        env.step(actions)
        assert bool(env.step(actions).is_last().all())
        env.seed(seeds)
        assert_seeded_first_steps(restart(), seeds)


class ProgressEnv(CountingEnv):
    """Keeps the progress values pushed by sync_progress."""

    def __init__(self, env_id=0, **kwargs):
        super().__init__(env_id=env_id, **kwargs)
        self.progress = []

    def sync_progress(self, progress):
        if progress == "fail":
            raise KeyError("bad progress")
        self.progress.append(progress)


@pytest.mark.parametrize("num_spares", [0, 1])
def test_sync_progress_reaches_every_env_that_defines_it(make_parallel, num_spares):
    ctors = [ProgressEnv, CountingEnv, functools.partial(ProgressEnv, env_id=2)]
    env = make_parallel(ctors, num_spare_envs_for_reload=num_spares)
    env.reset()
    assert env.sync_progress({"iterations": 3, "env_steps": 300}) is None
    env.step(torch.zeros(env.batch_size, dtype=torch.int64))
    env.sync_progress(0.75)
    # Spares included; the env without sync_progress is left alone.
    assert env.envs[0].progress == [{"iterations": 3, "env_steps": 300}, 0.75]
    assert env.envs[2].progress == env.envs[0].progress
    with pytest.raises(KeyError, match="bad progress"):
        env.sync_progress("fail")
    env.step(torch.zeros(env.batch_size, dtype=torch.int64))  # still usable
