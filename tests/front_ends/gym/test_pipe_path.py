"""FastVectorEnv takes what gymnasium's AsyncVectorEnv takes: its constructor
arguments (in its order), spaces of no fixed size, ``observation_mode`` and
``shared_memory=False``, served by the pipe path where shared memory cannot serve.

Where a behaviour is gymnasium's, the test runs it on
``AsyncVectorEnv(shared_memory=False)`` too, and results are compared with it
value for value (same seeds, same actions).
"""

import functools
import inspect
import multiprocessing
from typing import Any, Callable, List, Optional

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces

from alf_env.vector import FastVectorEnv
from tests.faults.ending_script import PIPE_FRONT_END
from tests.faults.endings import EXIT_BOUND, Cell, problems, run_cell
from tests.support.faults import BatchedFaultContract, VectorFrontEnd
from tests.support.gym_envs import InfoEnv, JitterEnv, SpaceEnv, assert_tree_equal, info_env
from tests.support.gym_runs import Trajectories, run_both, stepped_alone

EXIT_SLACK = 3.0  # as tests/faults/test_endings.py: a busy machine, torch's teardown


class Bag(gym.Space):
    """A custom space of no fixed size: frozensets of up to ``size`` ints below ``n``."""

    def __init__(self, n: int = 6, size: int = 3, seed: Optional[int] = None) -> None:
        super().__init__(None, None, seed)
        self.n, self.size = n, size

    def sample(self, mask: Any = None, probability: Any = None) -> frozenset:
        k = int(self.np_random.integers(0, self.size + 1))
        return frozenset(int(x) for x in self.np_random.integers(0, self.n, k))

    def contains(self, x: Any) -> bool:
        return isinstance(x, frozenset) and all(0 <= v < self.n for v in x)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Bag) and (self.n, self.size) == (other.n, other.size)


NO_FIXED_SIZE = {
    "graph": spaces.Graph(spaces.Box(0, 1, (2,), np.float32), spaces.Discrete(3)),
    "sequence": spaces.Sequence(spaces.Discrete(4)),
    "stacked_sequence": spaces.Sequence(spaces.Box(0, 1, (2,), np.float32), stack=True),
    "custom": Bag(),
}


def async_pipe(env_fns: List[Callable], **kwargs: Any) -> AsyncVectorEnv:
    return AsyncVectorEnv(env_fns, shared_memory=False, **kwargs)


def fast_pipe(env_fns: List[Callable], **kwargs: Any) -> FastVectorEnv:
    return FastVectorEnv(env_fns, shared_memory=False, **kwargs)


FAST = {"FastVectorEnv": FastVectorEnv, "FastVectorEnv(shared_memory=False)": fast_pipe}
MAKERS = {"AsyncVectorEnv(shared_memory=False)": async_pipe, **FAST}


def run_beside_async(env_fns: List[Callable], make: Callable, steps: int, seed: int = 0,
                     **kwargs: Any) -> Any:
    """Steps ``make(env_fns)`` beside ``AsyncVectorEnv(shared_memory=False)``
    (same seeds, same actions), asserting equal results; returns the env's
    ``shared_memory``."""
    ref = async_pipe(env_fns, **kwargs)
    env = make(env_fns, **kwargs)
    try:
        assert env.single_observation_space == ref.single_observation_space
        assert env.observation_space == ref.observation_space
        assert_tree_equal(env.reset(seed=seed), ref.reset(seed=seed), "reset")
        ref.action_space.seed(seed)
        for t in range(steps):
            actions = ref.action_space.sample()
            assert_tree_equal(env.step(actions), ref.step(actions), f"step {t}")
        return env.shared_memory
    finally:
        env.close()
        ref.close()


# -- spaces of no fixed size ---------------------------------------------------------


@pytest.mark.parametrize("make", FAST.values(), ids=FAST.keys())
@pytest.mark.parametrize("name", sorted(NO_FIXED_SIZE))
def test_observations_of_no_fixed_size_equal_async_vector_env(name, make):
    # Through shared memory (the values beside the rows) or the pipe path.
    fn = functools.partial(SpaceEnv, NO_FIXED_SIZE[name], spaces.Discrete(2))
    assert run_beside_async([fn] * 3, make, 12, seed=3) is (make is FastVectorEnv)


# Not stacked_sequence: SpaceEnv echoes each action in its info, and the infos
# of a batch cannot hold arrays of different shapes (gymnasium's rule).
@pytest.mark.parametrize("name", ["graph", "sequence", "custom"])
def test_actions_of_no_fixed_size_fall_back_to_the_pipe(name):
    # Shared memory cannot carry them: FastVectorEnv steps through the pipe.
    fn = functools.partial(SpaceEnv, spaces.Discrete(3), NO_FIXED_SIZE[name])
    assert run_beside_async([fn] * 2, FastVectorEnv, 10, seed=4,
                            autoreset_mode=AutoresetMode.SAME_STEP) is False


def test_bad_batches_of_actions_of_no_fixed_size_are_refused_before_anything_is_sent():
    fn = functools.partial(SpaceEnv, spaces.Discrete(3), NO_FIXED_SIZE["sequence"],
                           episode_length=100)
    with FastVectorEnv([fn] * 2) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"action: expected a batch of 2 values .*got "
                                             r"int: .*not iterable"):
            env.step(0)
        with pytest.raises(ValueError, match=r"action: expected a batch of 2 values of "
                                             r"Sequence\(Discrete\(4\), stack=False\), got 1"):
            env.step(((1, 2),))
        # Nothing was sent: each env takes its first step now.
        *_, infos = env.step(((1,), (2, 3)))
        assert env.get_attr("_t") == (1, 1)
        assert infos["action"].tolist() == [(1,), (2, 3)]


# -- shared_memory=False on envs of fixed size -----------------------------------------


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.name)
def test_pipe_path_matches_sync_vector_env_in_every_autoreset_mode(mode):
    assert run_both([info_env] * 4, 150, seed=11, autoreset_mode=mode, shared_memory=False,
                    envs_per_worker=2) >= 4
    assert run_both([lambda: gym.make("CartPole-v1")] * 3, 120, seed=5, autoreset_mode=mode,
                    shared_memory=False) >= 3


def test_pipe_path_equals_async_vector_env():
    assert run_beside_async([functools.partial(InfoEnv, i) for i in range(3)], fast_pipe,
                            40, seed=2) is False


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
def test_copy_false_returns_what_the_next_step_overwrites(make):
    env = make([lambda: gym.make("CartPole-v1")] * 2, copy=False)
    try:
        first, _ = env.reset(seed=0)
        saved = first.copy()
        second = env.step(np.ones(2, np.int64))[0]
        assert np.shares_memory(first, second)
        assert not np.array_equal(first, saved)
    finally:
        env.close()


def jittery_env(env_id: int, sequence_actions: bool) -> gym.Env:
    env = (SpaceEnv(spaces.Box(0, 1, (2,), np.float32), spaces.Sequence(spaces.Discrete(3)))
           if sequence_actions else InfoEnv(env_id))
    return JitterEnv(env, 0.004, seed=env_id)


@pytest.mark.parametrize("sequence_actions", [False, True], ids=["fixed", "sequence"])
def test_pipe_path_async_mode_each_env_sees_what_stepping_it_alone_gives(sequence_actions):
    seed, num_envs, batch_size = 100, 6, 4
    fns = [functools.partial(jittery_env, i, sequence_actions) for i in range(num_envs)]
    with FastVectorEnv(fns, shared_memory=False, batch_size=batch_size,
                       envs_per_worker=2) as env:
        assert env.shared_memory is False
        log = Trajectories(num_envs, env.single_action_space, seed=1000)
        obs, infos = env.reset(seed=seed)
        log.record((obs, np.zeros(batch_size), np.zeros(batch_size, bool),
                    np.zeros(batch_size, bool), infos))
        result = (infos,)
        for _ in range(30):
            ids = result[-1]["env_id"]
            env.send(log.next_actions(ids.tolist()), ids)
            env.call("np_random_seed")  # a pipe call while envs are in flight
            result = env.recv()
            log.record(result)
    for i, fn in enumerate(fns):
        actions = log.actions[i][:len(log.results[i]) - 1]
        expected = stepped_alone(fn, seed + i, actions)
        for t, (got, want) in enumerate(zip(log.results[i], expected)):
            assert_tree_equal(got, want, f"env {i} step {t}")


def test_pipe_path_calls_and_attributes():
    with fast_pipe([functools.partial(InfoEnv, i) for i in range(3)], envs_per_worker=3) as env:
        env.reset(seed=0)
        env.set_attr("marker", [10, 11, 12])
        assert env.get_attr("marker") == (10, 11, 12)
        assert env.call("get_pid") == tuple([env.worker_pids()[0]] * 3)


# -- observation_mode ---------------------------------------------------------------------

BOUNDS = [spaces.Box(0, i, (5,), np.float32) for i in range(1, 4)]
PAIR = (spaces.Box(0, np.repeat(np.arange(1, 4), 5).reshape(3, 5).astype(np.float32),
                   (3, 5), np.float32),
        spaces.Box(0, 1, (5,), np.float32))


@pytest.mark.parametrize("make", FAST.values(), ids=FAST.keys())
@pytest.mark.parametrize("mode", ["different", PAIR], ids=["different", "pair"])
def test_observation_mode_with_different_bounds_equals_async_vector_env(mode, make):
    fns = [functools.partial(SpaceEnv, space, spaces.Discrete(2)) for space in BOUNDS]
    # Same shape and dtype: shared memory serves them (unless told not to).
    assert run_beside_async(fns, make, 10, seed=1, observation_mode=mode) is (
        make is FastVectorEnv)
    with make(fns, observation_mode=mode) as env:
        assert env.observation_space == batch_differing_spaces(BOUNDS)
        assert env.single_observation_space == (BOUNDS[0] if mode == "different" else PAIR[1])


VECTORS = [spaces.Box(0, 1, (i + 1,), np.float32) for i in range(3)]
IMAGES = [spaces.Box(0, 255, (8 * k, 8 * k, 3), np.uint8) for k in (1, 2)]
MIXED = [spaces.Box(0, 1, (3,), np.float32), spaces.Discrete(5),
         spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(0, 1, (2,), np.float32)})]
REFUSED = [  # (spaces, mode, the error gymnasium raises too, its message)
    (VECTORS, "different", ValueError, r"Expected all Box.low shape to be equal"),
    (IMAGES, "different", ValueError, r"Expected all Box.low shape to be equal"),
    (VECTORS, (spaces.Box(0, 4, (3, 5)), spaces.Box(0, 4, (5,))), RuntimeError,
     r"do not share a common shape and dtype"),
    (MIXED, "same", RuntimeError, r"observation spaces are not equivalent\. .*If this is "
                                  r"intentional, use `observation_mode='different'` instead"),
    (MIXED, "different", TypeError, r"Expects all spaces to be of the same type"),
    (BOUNDS, "same", RuntimeError, r"observation spaces are not equivalent"),
]


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
@pytest.mark.parametrize("case", range(len(REFUSED)))
def test_observation_spaces_that_do_not_fit_the_mode_are_refused(case, make):
    space_list, mode, error, match = REFUSED[case]
    fns = [functools.partial(SpaceEnv, space, spaces.Discrete(2)) for space in space_list]
    with pytest.raises(error, match=match):
        make(fns, observation_mode=mode)


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
def test_bad_observation_mode_raises_what_gymnasium_raises(make):
    fns = [functools.partial(SpaceEnv, BOUNDS[0], spaces.Discrete(2))] * 2
    with pytest.raises(ValueError, match=r"Invalid `observation_mode`, expected: 'same' or "
                                         r"'different' or tuple of single and batch "
                                         r"observation space, actual got invalid"):
        make(fns, observation_mode="invalid")
    with pytest.raises(TypeError, match=r"Expected both elements of observation_mode to be "
                                        r"Spaces"):
        make(fns, observation_mode=(BOUNDS[0], "box"))


def test_observation_mode_different_needs_the_synchronous_mode():
    fns = [functools.partial(SpaceEnv, space, spaces.Discrete(2)) for space in BOUNDS]
    with pytest.raises(ValueError, match=r"observation_mode='different': the asynchronous "
                                         r"mode .* give the pair"):
        FastVectorEnv(fns, observation_mode="different", batch_size=1)


# -- the other arguments of AsyncVectorEnv ---------------------------------------------


def test_positional_arguments_follow_async_vector_env():
    theirs = list(inspect.signature(AsyncVectorEnv.__init__).parameters)[1:]
    ours = list(inspect.signature(FastVectorEnv.__init__).parameters)[1:len(theirs) + 1]
    assert ours == theirs
    fns = [lambda: gym.make("CartPole-v1")] * 2
    with FastVectorEnv(fns, False, False, "spawn", False, None, "same",
                       AutoresetMode.SAME_STEP, 1) as env:
        assert (env.shared_memory, env.copy, env.context, env.daemon) == (
            False, False, "spawn", False)
        assert env.autoreset_mode is AutoresetMode.SAME_STEP and env.num_workers == 1


def test_context_none_is_the_default_start_method():
    with FastVectorEnv([lambda: gym.make("CartPole-v1")], context=None) as env:
        assert env.context == multiprocessing.get_context().get_start_method()


def test_worker_argument_raises_type_error_naming_the_alternative():
    def worker(*args):
        pass

    with pytest.raises(TypeError, match=r"a custom worker function is not supported by "
                                        r"FastVectorEnv.*gymnasium\.Wrapper.*AsyncVectorEnv"):
        FastVectorEnv([lambda: gym.make("CartPole-v1")], worker=worker)


def _noop() -> None:
    pass


class ChildStartingEnv(gym.Env):
    """An env that starts a process of its own while it is built."""

    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        child = multiprocessing.get_context("fork").Process(target=_noop)
        child.start()
        child.join()
        self.child_exitcode = child.exitcode

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
def test_daemon_false_lets_envs_start_processes(make):
    env = make([ChildStartingEnv] * 2, daemon=False)
    try:
        assert env.get_attr("child_exitcode") == (0, 0)
    finally:
        env.close()


def test_daemonic_workers_refuse_envs_that_start_processes():
    with pytest.raises(AssertionError, match=r"daemonic processes are not allowed to have "
                                             r"children"):
        FastVectorEnv([ChildStartingEnv] * 2)


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
@pytest.mark.parametrize("value, match", [
    (0, r"`max_concurrency` must be a positive or None, got 0\."),
    ("2", r"`max_concurrency` must be an integer or None, got <class 'str'>\.")])
def test_bad_max_concurrency_raises_what_gymnasium_raises(make, value, match):
    with pytest.raises(ValueError, match=match):
        make([lambda: gym.make("CartPole-v1")] * 2, max_concurrency=value)


def test_max_concurrency_bounds_the_workers():
    fns = [lambda: gym.make("CartPole-v1")] * 4
    with FastVectorEnv(fns, max_concurrency=2) as env:
        assert env.num_workers <= 2
    with FastVectorEnv(fns, max_concurrency=3, batch_size=2) as env:
        assert env.num_workers == 2  # asynchronous mode: workers of equal size
    with pytest.raises(ValueError, match=r"max_concurrency=2: 4 workers would step 4 envs "
                                         r"at once"):
        FastVectorEnv(fns, max_concurrency=2, num_workers=4)


# -- faults and endings on the pipe path ----------------------------------------------


class PipeFrontEnd(VectorFrontEnd):
    """``FastVectorEnv(shared_memory=False)`` (one env per worker)."""

    name = "FastVectorEnv(shared_memory=False)"
    long_run_backend = "vector_pipe"

    def make(self, fault=None, ctor_delays=None, step_delays=None, parallel_start=True,
             **kwargs):
        kwargs.setdefault("shared_memory", False)
        env = super().make(fault, ctor_delays, step_delays, parallel_start, **kwargs)
        assert env.shared_memory is False
        return env


class TestPipePathFaults(BatchedFaultContract):
    frontend = PipeFrontEnd()


PIPE_ENDINGS = ("end", "raise", "sigint_group_step", "sigint_group_wait", "sigterm",
                "sigkill")


@pytest.mark.parametrize("ending", PIPE_ENDINGS)
def test_pipe_path_script_endings_are_quick_quiet_and_leave_nothing(ending):
    # Workers that are not daemonic (daemon=False) end with the script too.
    cell = Cell(PIPE_FRONT_END, "fork", 4, ending)
    outcome = run_cell(cell)
    report = f"stdout: {outcome.stdout}\nstderr:\n{outcome.stderr}"
    assert problems(cell, outcome) == [], report
    assert outcome.exit_time < EXIT_BOUND + EXIT_SLACK, report
