"""alf_env.sb3.FastSubprocVecEnv: SB3's VecEnv contract, value for value against SB3's own."""

import functools
import subprocess
import sys
import warnings
from typing import Any, Callable, List, Optional

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecCheckNan,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)

from alf_env.control_plane.process_environment import ProcessEnvironment
from alf_env.errors import EnvironmentProcessError
from alf_env.sb3 import FastSubprocVecEnv
from tests.support.gym_envs import InfoEnv, ModulesEnv, assert_tree_equal
from tests.support.paths import REPO_ROOT


class ProbeError(RuntimeError):
    """What ``Sb3ProbeEnv(fault="raise")`` raises."""


class Sb3ProbeEnv(InfoEnv):
    """``InfoEnv`` (seeded, infos of many kinds, both kinds of episode end, reset
    options echoed in the reset info) with the spaces SB3 accepts.

    Args:
        obs_kind: "box", "dict" or "tuple" observations.
        fault: "" (none), "raise" (ProbeError at step 3) or "nan" (a NaN
            observation at step 3).
        render_mode: "rgb_array" or None.
    """

    def __init__(self, obs_kind: str = "box", fault: str = "",
                 render_mode: Optional[str] = "rgb_array") -> None:
        super().__init__()
        box = spaces.Box(-100.0, 100.0, (3,), np.float32)
        self.obs_kind = obs_kind
        self.observation_space = {
            "box": box,
            "dict": spaces.Dict({"pos": box, "count": spaces.Discrete(50)}),
            "tuple": spaces.Tuple((box, spaces.Discrete(50))),
        }[obs_kind]
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.fault = fault
        self.render_mode = render_mode

    def _obs(self) -> Any:
        pos = self._pos.copy()
        if self.fault == "nan" and self._t == 3:
            pos[0] = np.nan
        count = self._t % 50
        return {"box": pos, "dict": {"pos": pos, "count": count},
                "tuple": (pos, count)}[self.obs_kind]

    def step(self, action):
        if self.fault == "raise" and self._t == 2:
            raise ProbeError("probe failure at step 3")
        return super().step((1, np.asarray(action, np.float32)))


def probe_fns(n: int, **kwargs: Any) -> List[Callable[[], gym.Env]]:
    return [lambda: Sb3ProbeEnv(**kwargs) for _ in range(n)]


def actions_for(step: int, n: int) -> np.ndarray:
    return np.random.default_rng(step).uniform(-1, 1, (n, 2)).astype(np.float32)


def without_times(infos: List[dict]) -> List[dict]:
    """Infos without the wall-clock entries of Monitor/VecMonitor (``episode["t"]``)."""
    for info in infos:
        if isinstance(info.get("episode"), dict):
            info["episode"].pop("t", None)
    return infos


def assert_steps_equal(ours: tuple, theirs: tuple, exact_reward_dtype: bool = True) -> None:
    obs, rewards, dones, infos = ours
    assert_tree_equal(obs, theirs[0])
    if exact_reward_dtype:
        assert rewards.dtype == theirs[1].dtype
    np.testing.assert_array_equal(rewards, theirs[1].astype(rewards.dtype))
    assert dones.dtype == np.bool_
    np.testing.assert_array_equal(dones, theirs[2])
    assert_tree_equal(without_times(list(infos)), without_times(list(theirs[3])))


def workers_of(venv: FastSubprocVecEnv) -> List[psutil.Process]:
    """The worker processes, as psutil handles (taken while they run)."""
    return [psutil.Process(pid) for pid in venv.worker_pids()]


def all_gone(processes: List[psutil.Process]) -> bool:
    """No process of ``processes`` runs: each exited (a zombie counts as exited).
    ``is_running`` is False too once the pid names another process (psutil
    compares start times), so a reused pid does not count."""
    def running(process: psutil.Process) -> bool:
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # gone between the two looks
            return False
    return not [p for p in processes if running(p)]


@pytest.mark.parametrize("start_method, obs_kind, envs_per_worker", [
    ("fork", "dict", 1), ("spawn", "tuple", 2), ("forkserver", "box", None)])
def test_same_results_as_dummy_and_subproc_vec_env(start_method, obs_kind, envs_per_worker):
    """obs, rewards, dones, infos and reset_infos over 300 steps with episode ends
    of both kinds, a re-seeded reset halfway."""
    fns = probe_fns(4, obs_kind=obs_kind)
    ours = FastSubprocVecEnv(fns, start_method, envs_per_worker=envs_per_worker)
    dummy = DummyVecEnv(fns)
    subproc = SubprocVecEnv(fns, start_method="fork")
    envs = (ours, dummy, subproc)
    try:
        dones_seen = truncations_seen = 0
        for phase in range(2):
            for env in envs:
                assert env.seed(10 + phase) == [10 + phase + i for i in range(4)]
            first = [env.reset() for env in envs]
            assert_tree_equal(first[0], first[1])
            assert_tree_equal(first[0], first[2])
            assert_tree_equal(ours.reset_infos, dummy.reset_infos)
            for t in range(150):
                actions = actions_for(t, 4)
                results = [env.step(actions) for env in envs]
                assert_steps_equal(results[0], results[1])
                assert_steps_equal(results[0], results[2], exact_reward_dtype=False)
                assert_tree_equal(ours.reset_infos, dummy.reset_infos)
                assert_tree_equal(ours.reset_infos, list(subproc.reset_infos))
                dones_seen += int(results[0][2].sum())
                truncations_seen += sum(i["TimeLimit.truncated"] for i in results[0][3])
        assert dones_seen > truncations_seen > 10  # both kinds of episode end happened
    finally:
        workers = workers_of(ours)
        for env in envs:
            env.close()
    assert all_gone(workers)


def test_seed_is_used_once_and_options_per_env():
    fns = probe_fns(4)
    with_ours, with_dummy = FastSubprocVecEnv(fns, "fork"), DummyVecEnv(fns)
    try:
        for env in (with_ours, with_dummy):
            env.seed(3)
        first = with_ours.reset()
        assert_tree_equal(first, with_dummy.reset())
        # The next reset is unseeded: each env's generator goes on (not seed 3 again).
        second = with_ours.reset()
        assert_tree_equal(second, with_dummy.reset())
        assert not np.array_equal(first, second)

        options = [{"level": 1}, {}, {"level": 1}, {"level": 2, "mode": "x"}]
        for env in (with_ours, with_dummy):
            env.set_options(options)
            env.reset()
        assert [info.get("options") for info in with_ours.reset_infos] == [
            {"level": 1}, None, {"level": 1}, {"level": 2, "mode": "x"}]
        assert_tree_equal(with_ours.reset_infos, with_dummy.reset_infos)
        with_ours.reset()  # options, like seeds, are used once
        assert all("options" not in info for info in with_ours.reset_infos)
        with_ours.set_options({"level": 5})  # one dict: the same for every env
        with_ours.reset()
        assert [info["options"] for info in with_ours.reset_infos] == [{"level": 5}] * 4
    finally:
        with_ours.close()
        with_dummy.close()


def test_attributes_methods_and_wrappers_by_index():
    fns = [lambda: Monitor(Sb3ProbeEnv()) for _ in range(3)]
    ours, dummy = FastSubprocVecEnv(fns, "fork", envs_per_worker=1), DummyVecEnv(fns)
    try:
        for env in (ours, dummy):
            env.seed(0)
            env.reset()
        assert ours.get_attr("scale", indices=[2, 0]) == [1.0, 1.0]
        ours.set_attr("scale", 2.5, indices=1)
        dummy.set_attr("scale", 2.5, indices=1)
        assert ours.get_attr("scale") == [1.0, 2.5, 1.0]
        pids = ours.env_method("get_pid", indices=[0, 2, 2])
        assert pids[1] == pids[2] and len(set(pids)) == 2
        assert set(pids) <= set(ours.worker_pids())
        assert ours.env_is_wrapped(Monitor) == [True] * 3
        assert ours.env_is_wrapped(gym.wrappers.TimeLimit, indices=[1]) == [False]
        assert ours.has_attr("scale") and not ours.has_attr("no_such_attribute")
        with pytest.raises(AttributeError, match="no_such_attribute"):
            ours.get_attr("no_such_attribute")
        with pytest.raises(IndexError, match=r"expected env indices in \[0, 3\), got 3"):
            ours.get_attr("scale", indices=[3])
        for t in range(40):  # the new scale of env 1 shows in its steps, as in SB3
            assert_steps_equal(ours.step(actions_for(t, 3)), dummy.step(actions_for(t, 3)))
        assert ours.env_method("get_episode_rewards") == dummy.env_method("get_episode_rewards")
    finally:
        ours.close()
        dummy.close()


def test_render_and_get_images():
    ours, dummy = FastSubprocVecEnv(probe_fns(4), "fork"), DummyVecEnv(probe_fns(4))
    unrendered = FastSubprocVecEnv(probe_fns(2, render_mode=None), "fork")
    try:
        for env in (ours, dummy):
            env.seed(1)
            env.reset()
            env.step(actions_for(0, 4))
        assert_tree_equal(list(ours.get_images()), list(dummy.get_images()))
        assert_tree_equal(ours.render("rgb_array"), dummy.render("rgb_array"))
        assert ours.render("rgb_array").shape == (4, 4, 3)  # 4 frames of 2x2, tiled 2x2
        with pytest.warns(UserWarning, match="render mode is None"):
            assert unrendered.get_images() == [None, None]
    finally:
        ours.close()
        dummy.close()
        unrendered.close()


@pytest.mark.parametrize("wrap", [
    lambda venv: VecNormalize(venv, gamma=0.9),
    lambda venv: VecFrameStack(venv, n_stack=3),
    lambda venv: VecNormalize(VecFrameStack(VecMonitor(venv), n_stack=2)),
], ids=["VecNormalize", "VecFrameStack", "VecMonitor+VecFrameStack+VecNormalize"])
def test_sb3_vec_env_wrappers_on_top(wrap):
    ours = wrap(FastSubprocVecEnv(probe_fns(3), "fork"))
    dummy = wrap(DummyVecEnv(probe_fns(3)))
    try:
        for env in (ours, dummy):
            env.seed(4)
        assert_tree_equal(ours.reset(), dummy.reset())
        for t in range(200):
            assert_steps_equal(ours.step(actions_for(t, 3)), dummy.step(actions_for(t, 3)))
    finally:
        ours.close()
        dummy.close()


def test_sb3_checks_apply():
    check_env(Sb3ProbeEnv("dict"))  # the test env itself is what SB3 accepts
    venv = VecCheckNan(FastSubprocVecEnv(probe_fns(2, fault="nan"), "fork"),
                       raise_exception=True)
    try:
        # Seeded: an unseeded episode may end (and reset) before its NaN step.
        venv.seed(0)
        venv.reset()
        for t in range(2):
            venv.step(actions_for(t, 2))
        with pytest.raises(ValueError, match="nan"):
            venv.step(actions_for(2, 2))
    finally:
        venv.close()


def test_env_error_comes_back_with_its_type_and_close_ends_the_workers():
    venv = FastSubprocVecEnv(probe_fns(2, fault="raise"), "fork")
    workers = workers_of(venv)
    venv.seed(0)  # an unseeded episode may end (and reset) before its failing step
    venv.reset()
    venv.step(actions_for(0, 2))
    venv.step(actions_for(1, 2))
    with pytest.raises(ProbeError, match="probe failure at step 3"):
        venv.step(actions_for(2, 2))
    assert not venv.waiting
    venv.close()
    venv.close()  # closing twice is fine
    assert all_gone(workers)


def test_env_error_names_the_env_that_raised_when_a_worker_holds_several():
    # Env 3 shares its worker with env 2; the error names env 3 alone.
    fns = probe_fns(3) + [lambda: Sb3ProbeEnv(fault="raise")]
    venv = FastSubprocVecEnv(fns, "fork", num_workers=2)
    try:
        venv.seed(0)
        venv.reset()
        venv.step(actions_for(0, 4))
        venv.step(actions_for(1, 4))
        with pytest.raises(ProbeError, match="probe failure at step 3") as info:
            venv.step(actions_for(2, 4))
        cause = info.value.__cause__
        assert isinstance(cause, EnvironmentProcessError) and cause.env_id == 3
        assert "raised in the worker of env 3 during step" in str(cause)
        notes = "".join(info.value.__notes__)
        assert "raised by env 3 " in notes and "env 2" not in notes
    finally:
        venv.close()


def test_reset_while_a_step_is_pending_cancels_it():
    venv = FastSubprocVecEnv(probe_fns(2), "fork")
    try:
        venv.seed(0)
        venv.reset()
        venv.step_async(actions_for(0, 2))
        venv.seed(0)
        first = venv.reset()
        assert not venv.waiting
        reference = DummyVecEnv(probe_fns(2))
        reference.seed(0)
        assert_tree_equal(first, reference.reset())
        assert_steps_equal(venv.step(actions_for(1, 2)), reference.step(actions_for(1, 2)))
    finally:
        venv.close()


def test_bad_start_method_names_the_argument():
    # multiprocessing's own words, which SB3's tests match for SubprocVecEnv.
    with pytest.raises(ValueError, match=r"start_method: cannot find context for 'threads' "
                                         r"\(expected one of"):
        FastSubprocVecEnv(probe_fns(2), "threads")


@pytest.fixture
def one_torch_thread():
    """One torch thread for the tests that build SB3 models: quick on a busy machine."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_make_vec_env_and_evaluate_policy(one_torch_thread):
    results = []
    for cls, kwargs in ((FastSubprocVecEnv, {"start_method": "fork"}), (DummyVecEnv, {})):
        venv = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=cls,
                            vec_env_kwargs=kwargs)
        try:
            model = PPO("MlpPolicy", venv, n_steps=32, seed=0, device="cpu")
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no "not wrapped with Monitor" warning
                results.append(evaluate_policy(model, venv, n_eval_episodes=4,
                                               return_episode_rewards=True))
        finally:
            venv.close()
    assert results[0] == results[1]
    assert len(results[0][0]) == 4


def test_ppo_learns_cartpole_as_with_dummy_vec_env(one_torch_thread):
    """Same seed, same budget: PPO reaches the same mean return on both VecEnvs."""
    mean_returns = []
    for cls, kwargs in ((FastSubprocVecEnv, {"start_method": "fork"}), (DummyVecEnv, {})):
        venv = make_vec_env("CartPole-v1", n_envs=4, seed=0, vec_env_cls=cls,
                            vec_env_kwargs=kwargs)
        try:
            model = PPO("MlpPolicy", venv, n_steps=128, batch_size=128, n_epochs=4,
                        learning_rate=1e-3, seed=0, device="cpu")
            model.learn(12_000)  # about the smallest budget where PPO clearly learns
            mean_returns.append(np.mean([e["r"] for e in model.ep_info_buffer]))
        finally:
            venv.close()
    ours, dummy = mean_returns
    # Random play gets ~22; with this seed and budget PPO gets ~100 (last 100 episodes).
    assert ours > 60, f"mean return {ours}: PPO did not learn"
    assert abs(ours - dummy) <= 0.15 * dummy, (ours, dummy)


def test_import_alf_env_does_not_need_stable_baselines3():
    code = ("import sys; sys.modules['stable_baselines3'] = None\n"
            "import alf_env, alf_env.vector\n"
            "try:\n"
            "    import alf_env.sb3\n"
            "except ImportError as exc:\n"
            "    print(exc.name, '|', exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    name, message = proc.stdout.strip().split(" | ")
    assert name.startswith("stable_baselines3")
    assert "pip install 'alf_env[sb3]'" in message


def test_spawned_workers_do_not_import_stable_baselines3_or_torch():
    venv = FastSubprocVecEnv([ModulesEnv], "spawn")
    try:
        assert venv.env_method("imported", "stable_baselines3") == [False]
        assert venv.env_method("imported", "torch") == [False]
    finally:
        venv.close()


class ActionRecorder(gym.Env):
    """Keeps the action of its last step (``last_action``), as it received it."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space
        self.last_action: Any = None

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.last_action = action
        return np.zeros(1, np.float32), 0.0, False, False, {}


def same_item(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are the same value of the same type (and dtype), NaN included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_item(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_item(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, np.generic)):
        return (a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    return a == b or (a != a and b != b)


_DISCRETE = spaces.Discrete(5)
_PAIR = spaces.Tuple((spaces.Discrete(5), spaces.Discrete(5)))


@pytest.mark.parametrize("space, actions", [
    (_DISCRETE, np.array([0.7, 1.0])),                      # floats: not cast to 0 and 1
    (_DISCRETE, np.array([np.nan, 2.0])),                   # nor NaN to INT64_MIN
    (_DISCRETE, [np.inf, 3]),
    (_DISCRETE, np.array([2 ** 63, 1], np.uint64)),          # beyond int64
    (_DISCRETE, [2 ** 70, 4]),                               # beyond any dtype
    (_DISCRETE, np.array([1, 2], np.int32)),                 # exact: the shared rows
    (spaces.Box(-1.0, 1.0, (2,), np.float32), np.array([[0.1, 0.2], [0.5, 0.25]])),
    (_PAIR, [(1, 2), (3, 4)]),                               # one tuple per env, not per field
    (_PAIR, [(1, 2, 3), (0, 1)]),                            # not the space's structure
    (spaces.Dict({"a": _DISCRETE, "b": spaces.Box(-1.0, 1.0, (2,), np.float32)}),
     [{"a": 1, "b": np.zeros(2, np.float32)}, {"a": 0.5, "b": np.ones(2, np.float32)}]),
], ids=["discrete_0.7", "discrete_nan", "discrete_inf", "discrete_2**63", "discrete_2**70",
        "discrete_int32", "box_float64", "tuple_per_env", "tuple_other_length", "dict_per_env"])
def test_each_env_receives_its_action_as_subproc_vec_env_sends_it(space, actions):
    """Env ``i`` gets ``actions[i]``, of the same type, dtype and value as with
    ``SubprocVecEnv``: never cast (an exact one through shared memory, any
    other as it is, on the pipe)."""
    received = []
    for cls in (SubprocVecEnv, FastSubprocVecEnv):
        venv = cls([functools.partial(ActionRecorder, space)] * 2, start_method="fork")
        try:
            venv.reset()
            venv.step(actions)
            received.append(venv.get_attr("last_action"))
            venv.step(np.zeros(2, np.int64) if space is _DISCRETE else actions)
            received.append(venv.get_attr("last_action"))  # a passed action is used once
        finally:
            venv.close()
    subproc, _, ours, after = received
    for env, (theirs, mine) in enumerate(zip(subproc, ours)):
        assert same_item(mine, theirs), (env, mine, theirs)
    if space is _DISCRETE:
        assert after == [0, 0] and all(type(a) is np.int64 for a in after)


def test_actions_must_be_one_per_env():
    venv = FastSubprocVecEnv([functools.partial(ActionRecorder, _PAIR)] * 2, "fork")
    try:
        venv.reset()
        with pytest.raises(ValueError, match=r"actions: expected one action per env \(2\), "
                                             r"got 3"):
            venv.step([(0, 0)] * 3)
        with pytest.raises(ValueError, match="got a dict; SB3 takes a list of per-env"):
            venv.step({"0": [0, 0], "1": [0, 0]})
        venv.step([(1, 2), (3, 4)])  # still usable
        assert venv.get_attr("last_action") == [(1, 2), (3, 4)]
    finally:
        venv.close()


def test_per_env_requests_reach_only_the_workers_of_those_envs(monkeypatch):
    venv = FastSubprocVecEnv(probe_fns(4), "fork", envs_per_worker=2)  # envs 0-1, 2-3
    try:
        sent = []
        real_call = ProcessEnvironment.call

        def spy(env, name, *args, **kwargs):
            sent.append((env.env_id, name))
            return real_call(env, name, *args, **kwargs)

        monkeypatch.setattr(ProcessEnvironment, "call", spy)
        payload = np.arange(1000.0)
        venv.env_method("set_wrapper_attr", "payload", payload, indices=[-1])
        assert sent == [(2, "call_some")]  # the worker of envs 2 and 3 only
        # Negative indices count from the end, as SB3's list indexing does.
        np.testing.assert_array_equal(venv.get_attr("payload", indices=[-1])[0], payload)
        assert venv.get_attr("scale", indices=[-4, 3, -1]) == [1.0, 1.0, 1.0]
        with pytest.raises(IndexError, match=r"expected env indices in \[0, 4\), got -5"):
            venv.get_attr("scale", indices=[-5])
    finally:
        venv.close()
