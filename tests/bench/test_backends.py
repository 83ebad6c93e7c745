"""alf_env.bench.backends and .references: what each backend builds, and when it is
skipped instead."""

import importlib.util
import math
import multiprocessing
import sys
import types
from typing import Any, Dict, List

import gymnasium as gym
import psutil
import pytest

from alf_env.bench import backends, references, workloads
from alf_env.bench.core import Actions, Plan, Skip
from alf_env.bench.measure import ProgressBar, measure, run_all
from alf_env.control_plane.affinity import usable_cpu_count
from tests.support.faults import wait_all_gone

PLAN = Plan(warmup=2, steps=10, seconds=0.1)


class RecordingVectorEnv(gym.vector.SyncVectorEnv):
    """A stand-in for a vector env class that records its keyword arguments."""
    calls: List[Dict[str, Any]] = []

    def __init__(self, env_fns, *, batch_size=None, envs_per_worker=1, num_workers=None,
                 worker_cpus="auto", num_actors=None):
        kwargs = dict(batch_size=batch_size, envs_per_worker=envs_per_worker,
                      num_workers=num_workers, worker_cpus=worker_cpus,
                      num_actors=num_actors)
        defaults = {("envs_per_worker", 1), ("worker_cpus", "auto")}
        RecordingVectorEnv.calls.append({k: v for k, v in kwargs.items()
                                         if (k, v) not in defaults
                                         and (v is not None or k == "worker_cpus")})
        super().__init__(env_fns)


@pytest.fixture
def recording(monkeypatch):
    RecordingVectorEnv.calls = []
    import alf_env.vector
    monkeypatch.setattr(alf_env.vector, "FastVectorEnv", RecordingVectorEnv)
    return RecordingVectorEnv.calls


@pytest.mark.parametrize("backend, kwargs", [
    ("fast_vector", {}),  # default arguments: a change of a default shows up here
    ("fast_vector_1pw", {"num_workers": 4}),
    ("fast_vector_epw4", {"envs_per_worker": 4}),
    ("fast_vector_spread", {"worker_cpus": "spread"}),
    ("fast_vector_os", {"worker_cpus": None}),
    ("fast_vector_async", {"batch_size": 2}),
])
def test_fast_vector_backends_pass_only_their_own_arguments(recording, backend, kwargs):
    runner = backends.BACKENDS[backend].build("W1", 4, Actions.make("W1", 4))
    runner.close()
    assert recording == [kwargs]
    assert runner.env_steps_per_round == (2 if backend == "fast_vector_async" else None)


def test_an_argument_the_class_does_not_take_yet_is_a_skip():
    class Old:
        def __init__(self, env_fns, worker_cpus=None):
            pass

    backends._check_kwargs(Old, {"worker_cpus": "spread"})
    with pytest.raises(Skip, match="Old has no argument num_workers"):
        backends._check_kwargs(Old, {"num_workers": 8})


def test_epw4_needs_a_multiple_of_four(recording):
    with pytest.raises(Skip, match="needs a multiple of 4 envs"):
        backends.BACKENDS["fast_vector_epw4"].build("W1", 6, Actions.make("W1", 6))
    assert recording == []


def test_ceiling_runs_one_process_per_usable_cpu_and_sums_their_rates():
    num_envs = 3
    runner = references.ceiling_runner("W1", num_envs, Actions.make("W1", num_envs))
    try:
        env_steps, seconds = runner.timed(PLAN)
    finally:
        runner.close()
    processes = usable_cpu_count()
    assert env_steps == processes * math.ceil(PLAN.steps * num_envs / processes)
    assert 0 < seconds < 60


def test_a_failing_ceiling_process_is_an_error_of_the_backend(monkeypatch):
    def broken(env_id: int = 0) -> gym.Env:
        raise OSError("no display")

    monkeypatch.setitem(workloads.WORKLOADS, "W1", workloads.WORKLOADS["W1"]._replace(
        make=broken))
    actions = Actions.make("W2", 2)  # W1 cannot make its probe any more
    with pytest.raises(RuntimeError, match=r"ceiling process \d failed: OSError: no display"):
        measure(references.ceiling_runner, "W1", 2, actions, PLAN)


class _CountingEnv(gym.Wrapper):
    """W1's env that counts, in memory shared with the forked workers, every
    step and every reset after the first."""

    def __init__(self, env: gym.Env, count: Any) -> None:
        super().__init__(env)
        self._count = count
        self._first = True

    def step(self, action):
        with self._count.get_lock():
            self._count.value += 1
        return self.env.step(action)

    def reset(self, **kwargs):
        if not self._first:
            with self._count.get_lock():
                self._count.value += 1
        self._first = False
        return self.env.reset(**kwargs)


@pytest.fixture
def counted_w1(monkeypatch):
    count = multiprocessing.get_context("fork").Value("q", 0)
    make = workloads.WORKLOADS["W1"].make
    monkeypatch.setitem(workloads.WORKLOADS, "W1", workloads.WORKLOADS["W1"]._replace(
        make=lambda env_id=0: _CountingEnv(make(env_id), count)))
    return count


def test_the_bare_lockstep_loop_steps_every_env_in_its_workers_once_a_round(counted_w1):
    num_envs = 4
    before = {p.pid for p in psutil.Process().children()}
    run = measure(references.bare_loop_runner, "W1", num_envs, Actions.make("W1", num_envs),
                  PLAN)
    assert run.env_steps == PLAN.steps * num_envs and run.rate > 0
    # The round that waits for the workers to build their envs, the warm-up, the timed.
    assert counted_w1.value == num_envs * (1 + PLAN.warmup + PLAN.steps)
    assert {p.pid for p in psutil.Process().children()} == before


def test_the_bare_lockstep_loop_gives_the_policy_a_batch_of_observations():
    runner = references.bare_loop_runner("W1", 4, Actions.make("W1", 4))
    try:
        observations = runner.step(0)[0]
    finally:
        runner.close()
    runner.close()  # idempotent
    assert observations.shape == (4,) + workloads.make_env("W1", 0).observation_space.shape


def test_a_dead_bare_lockstep_worker_is_an_error_not_a_hang():
    before = {p.pid for p in psutil.Process().children()}
    runner = references.bare_loop_runner("W1", 4, Actions.make("W1", 4))
    workers = [p for p in psutil.Process().children() if p.pid not in before]
    try:
        assert len(workers) == min(usable_cpu_count(), 4)
        worker = workers[0]
        worker.kill()
        # Dead but not reaped here: psutil's wait() would reap the runner's child behind
        # multiprocessing's back, which then keeps it among its children for good.
        assert wait_all_gone([worker.pid], timeout=5.0)
        with pytest.raises(RuntimeError, match="a worker's STEP ended with"):
            runner.step(0)
    finally:
        runner.close()
    assert not [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not [p for p in multiprocessing.active_children() if p.pid in {w.pid for w in workers}]


def test_envpool_steps_its_own_version_of_the_env():
    run = measure(references.envpool_runner, "CartPole-v1", 4,
                  Actions.make("CartPole-v1", 4), PLAN)
    assert run.env_steps == PLAN.steps * 4 and run.rate > 0


def test_envpool_is_skipped_for_synthetic_workloads_and_when_not_installed(monkeypatch):
    with pytest.raises(Skip, match="EnvPool has no version of this workload"):
        references.envpool_runner("S100", 2, Actions.make("S100", 2))
    real_find_spec = references.importlib.util.find_spec
    monkeypatch.setattr(references.importlib.util, "find_spec",
                        lambda name: None if name == "envpool" else real_find_spec(name))
    with pytest.raises(Skip, match=r"envpool is not installed \(`pip install envpool`"):
        references.envpool_runner("CartPole-v1", 2, Actions.make("CartPole-v1", 2))


def test_single_is_num_envs_steps_of_one_env_per_round():
    run = measure(references.single_runner, "W1", 3, Actions.make("W1", 3), PLAN)
    assert run.env_steps == PLAN.steps * 3


@pytest.mark.parametrize("backend, module", [("sb3_alf", "alf_env.sb3"),
                                             ("ray_vector", "alf_env.distributed")])
def test_helper_backends_report_not_available_when_their_module_does_not_import(
        monkeypatch, backend, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes the import raise ImportError
    cases, _ = run_all([("W1", 2)], [backend], PLAN, 2, ProgressBar(2, open("/dev/null", "w")))
    (result,) = cases[0]
    assert (result.status, result.runs) == ("skipped", [])
    assert result.note.startswith(f"{module}.")
    assert " not available (ModuleNotFoundError: " in result.note


def test_sb3_alf_runs_fast_subproc_vec_env_with_default_arguments(monkeypatch):
    from stable_baselines3.common.vec_env import DummyVecEnv

    made = []

    def fast_subproc_vec_env(env_fns):
        made.append(len(env_fns))
        return DummyVecEnv(env_fns)

    monkeypatch.setitem(sys.modules, "alf_env.sb3", types.SimpleNamespace(
        FastSubprocVecEnv=fast_subproc_vec_env))
    run = measure(backends.BACKENDS["sb3_alf"].build, "W1", 2, Actions.make("W1", 2), PLAN)
    assert made == [2] and run.env_steps == PLAN.steps * 2


class FakeRay(types.SimpleNamespace):
    """Records what the ``ray_vector`` backend does with Ray."""

    def __init__(self, initialized: bool) -> None:
        super().__init__(calls=[], initialized=initialized)

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs: Any) -> None:
        self.calls.append(("init", kwargs))
        self.initialized = True

    def shutdown(self) -> None:
        self.calls.append(("shutdown", {}))
        self.initialized = False


@pytest.mark.parametrize("already_running", [False, True])
def test_ray_vector_starts_and_stops_a_local_ray_only_if_none_runs(monkeypatch,
                                                                   already_running):
    ray = FakeRay(already_running)
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "alf_env.distributed", types.SimpleNamespace(
        RayVectorEnv=RecordingVectorEnv))
    RecordingVectorEnv.calls = []
    cases, interrupted = run_all([("W1", 2)], ["ray_vector"], PLAN, 2,
                                 ProgressBar(2, open("/dev/null", "w")))
    (result,) = cases[0]
    assert (result.status, len(result.runs), interrupted) == ("ok", 2, False), result.note
    assert RecordingVectorEnv.calls == [{"num_actors": 2}] * 2
    if already_running:
        assert ray.calls == []  # the user's Ray is left alone
    else:
        # Started for each measurement and stopped after it, so that Ray's daemons
        # do not take CPU while the other backends are measured.
        init = ("init", {"num_cpus": usable_cpu_count(), "include_dashboard": False,
                         "log_to_driver": False})
        assert ray.calls == [init, ("shutdown", {})] * 2


def test_every_backend_has_a_label_and_the_references_are_backends():
    assert all(b.label for b in backends.BACKENDS.values())
    assert set(backends.REFERENCES) <= set(backends.BACKENDS)
    assert set(backends.YARDSTICKS) <= set(backends.REFERENCES)


@pytest.mark.parametrize("backend, name", [
    ("fast", "FastParallelEnvironment"), ("fast_vector", "FastVectorEnv"),
    ("fast_vector_os", "FastVectorEnv (OS-placed)"), ("parallel", "ParallelAlfEnvironment"),
    ("sb3_alf", "FastSubprocVecEnv"), ("sb3_subproc", "SubprocVecEnv"),
    ("gym_sync", "SyncVectorEnv"), ("gym_async", "AsyncVectorEnv"), ("envpool", "EnvPool"),
    ("pufferlib", "PufferLib"), ("single", "plain loop (1 env)"), ("ceiling", "ceiling")])
def test_backends_print_as_the_names_users_know(backend, name):
    assert backends.display_name(backend) == name


def test_no_two_backends_share_a_name_and_a_name_that_is_no_id_is_kept():
    names = [b.name for b in backends.BACKENDS.values()]
    assert len(set(names)) == len(names)
    assert not set(names) & (set(backends.BACKENDS) - {"ceiling"})
    assert backends.display_name("FastVectorEnv (2 workers)") == "FastVectorEnv (2 workers)"


HAS_PUFFERLIB = importlib.util.find_spec("pufferlib") is not None


@pytest.mark.skipif(not HAS_PUFFERLIB,
                    reason="pufferlib-core is not installed (.ci/run installs it)")
@pytest.mark.parametrize("backend, steps_per_round", [
    ("pufferlib", 4), ("pufferlib_1w", 4), ("pufferlib_async", 2)])
def test_pufferlib_rows_step_the_workload_and_reap_their_workers(backend, steps_per_round):
    actions = Actions.make("CartPole-v1", 4)
    run = measure(backends.BACKENDS[backend].build, "CartPole-v1", 4, actions, PLAN)
    assert run.env_steps == PLAN.steps * steps_per_round
    assert run.rate > 0


def test_pufferlib_rows_are_skipped_when_pufferlib_does_not_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "pufferlib.vector", None)
    with pytest.raises(Skip, match="pufferlib-core"):
        backends.BACKENDS["pufferlib"].build("CartPole-v1", 4, Actions.make("CartPole-v1", 4))


def test_pufferlib_needs_envs_divisible_by_its_workers():
    if not HAS_PUFFERLIB:
        pytest.skip("pufferlib-core is not installed (.ci/run installs it)")
    with pytest.raises(Skip, match="divisible"):
        backends.BACKENDS["pufferlib"].build("CartPole-v1", 3, Actions.make("CartPole-v1", 3))


@pytest.mark.skipif(not HAS_PUFFERLIB,
                    reason="pufferlib-core is not installed (.ci/run installs it)")
def test_a_pufferlib_worker_that_dies_ends_the_step_with_an_error_naming_it():
    before = set(psutil.Process().children())
    runner = backends.BACKENDS["pufferlib"].build("W3", 4, Actions.make("W3", 4))
    try:
        runner.step(0)
        workers = set(psutil.Process().children()) - before
        assert len(workers) == 2
        workers.pop().kill()
        with pytest.raises(RuntimeError, match=r"PufferLib worker [01] exited with code -9"):
            for k in range(1, 1000):  # PufferLib alone would spin forever here
                runner.step(k)
    finally:
        runner.close()
