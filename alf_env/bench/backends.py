"""The benchmark's backends: one way each of batching ``num_envs`` envs.

A backend is a :class:`Backend` in :data:`BACKENDS`: a ``build(workload,
num_envs, actions)`` that returns a started, reset :class:`Runner` (or raises
:class:`Skip` when it cannot run here), the name a user knows it by, a label,
and optionally a ``teardown()`` run once at the end of the whole benchmark. Its
key in :data:`BACKENDS` is the id ``--backends`` takes (users' scripts name
backends by it); everything the bench prints names it by its user-facing name.
To add one, write its build function (most are a ``functools.partial`` of the
runners below) and add a line to :data:`BACKENDS`.

The alf_env backends without a suffix use the classes' *default arguments*,
so a change of a default shows up in them; the suffixed ones set one
argument explicitly.
"""

import functools
import importlib.util
import inspect
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import gymnasium as gym

from alf_env.bench.core import ACTION_SEED, NUM_ACTIONS, Actions, Runner, Skip
from alf_env.bench.references import (
    bare_loop_runner,
    ceiling_runner,
    envpool_runner,
    single_runner,
)
from alf_env.bench.workloads import make_env
from alf_env.control_plane.affinity import usable_cpu_count
from alf_env.lazy_import import import_from

#: Envs per worker of the ``fast_vector_epw4`` backend.
ENVS_PER_WORKER = 4
#: Ray actors of the ``ray_vector`` backend.
RAY_ACTORS = 2
#: The reference rows (not batched envs of alf_env or its alternatives).
REFERENCES = ("single", "ceiling", "bare_loop", "envpool")
#: The reference rows that measure the machine rather than a vector env one could
#: pick (EnvPool is a choice, for the envs it has a C++ version of).
YARDSTICKS = ("single", "ceiling", "bare_loop")


def _import(module: str, name: str, what: str) -> Any:
    """``module.name``, or :class:`Skip` saying why it is not available."""
    try:
        return import_from(module, name)
    except (ImportError, AttributeError) as err:
        raise Skip(f"{what} not available ({type(err).__name__}: {err})") from None


def _started(env: Any, reset: Callable[[], Any]) -> None:
    """Runs ``reset()``; closes ``env`` if that raises."""
    try:
        reset()
    except BaseException:
        env.close()
        raise


def env_fns(workload: str, num_envs: int) -> List[Callable[[], gym.Env]]:
    """Picklable constructors of ``num_envs`` envs of ``workload``."""
    return [functools.partial(make_env, workload, i) for i in range(num_envs)]


def _alf_env(workload: str, env_id: int = 0) -> Any:
    """Workload ``workload`` as an ALF environment (a picklable constructor)."""
    from alf_env.environments.alf_gym_wrapper import AlfGymWrapper

    return AlfGymWrapper(make_env(workload, env_id), env_id=env_id)


def _check_kwargs(env_class: Any, kwargs: Dict[str, Any]) -> None:
    """:class:`Skip` if ``env_class`` does not take one of ``kwargs`` (yet)."""
    params = inspect.signature(env_class).parameters
    missing = [k for k in kwargs if k not in params]
    if missing:
        raise Skip(f"{env_class.__name__} has no argument {', '.join(missing)}")


def _alf_runner(module: str, name: str, workload: str, num_envs: int, actions: Actions,
                **kwargs: Any) -> Runner:
    """Runner over an ALF batched env class ``module.name`` (``ParallelAlfEnvironment``'s
    constructor: a list of env constructors, then ``kwargs``)."""
    env_class = _import(module, name, name)
    kwargs = {k: (v(num_envs) if callable(v) else v) for k, v in kwargs.items()}
    _check_kwargs(env_class, kwargs)
    env = env_class([functools.partial(_alf_env, workload) for _ in range(num_envs)],
                    **kwargs)
    _started(env, env.reset)
    batches = actions.torch
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close)


def _gym_vector_runner(make_vector: Callable[[List[Callable[[], gym.Env]]], Any],
                       workload: str, num_envs: int, actions: Actions,
                       batch_size: Optional[int] = None) -> Runner:
    """Runner over a gymnasium vector env built by ``make_vector(env_fns)``.

    With ``batch_size``, each step sends the first ``batch_size`` actions (an
    asynchronous ``FastVectorEnv`` steps the envs of its last ``recv``).
    """
    env = make_vector(env_fns(workload, num_envs))
    _started(env, lambda: env.reset(seed=ACTION_SEED))
    batches = actions.numpy if batch_size is None else [b[:batch_size] for b in actions.numpy]
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close,
                  env_steps_per_round=batch_size)


def fast_vector_runner(workload: str, num_envs: int, actions: Actions,
                       async_mode: bool = False, **kwargs: Any) -> Runner:
    """Runner over ``FastVectorEnv`` with ``kwargs`` (callables get ``num_envs``);
    ``async_mode``: EnvPool-style, each step returns the first half of the envs
    (as does a ``batch_size`` in ``kwargs``)."""
    fast_vector_env = _import("alf_env.vector", "FastVectorEnv", "FastVectorEnv")
    kwargs = {k: (v(num_envs) if callable(v) else v) for k, v in kwargs.items()}
    _check_kwargs(fast_vector_env, kwargs)
    if num_envs % kwargs.get("envs_per_worker", 1):
        raise Skip(f"needs a multiple of {kwargs['envs_per_worker']} envs")
    batch_size = num_envs // 2 if async_mode else kwargs.get("batch_size")
    if batch_size is not None:
        if batch_size < 1:
            raise Skip("needs at least 2 envs")
        kwargs["batch_size"] = batch_size
    return _gym_vector_runner(lambda fns: fast_vector_env(fns, **kwargs),
                              workload, num_envs, actions, batch_size)


def _sb3_runner(make_vec: Callable[[List[Callable[[], gym.Env]]], Any], workload: str,
                num_envs: int, actions: Actions) -> Runner:
    """Runner over an SB3 ``VecEnv`` built by ``make_vec(env_fns)`` (same-step reset)."""
    env = make_vec(env_fns(workload, num_envs))
    env.seed(ACTION_SEED)
    _started(env, env.reset)
    batches = actions.numpy
    return Runner(step=lambda k: env.step(batches[k % NUM_ACTIONS]), close=env.close)


def _sb3_subproc(fns: List[Callable[[], gym.Env]]) -> Any:
    if importlib.util.find_spec("stable_baselines3") is None:
        raise Skip("stable-baselines3 is not installed; `pip install stable-baselines3` "
                   "adds this backend")
    from stable_baselines3.common.vec_env import SubprocVecEnv

    return SubprocVecEnv(fns, start_method="fork")


def _sb3_alf(fns: List[Callable[[], gym.Env]]) -> Any:
    return _import("alf_env.sb3", "FastSubprocVecEnv", "alf_env.sb3.FastSubprocVecEnv")(fns)


class _LocalRay:
    """A local Ray instance started by the ``ray_vector`` backend (if none runs)."""
    started = False

    @classmethod
    def ensure(cls) -> None:
        try:
            import ray
        except ImportError:
            raise Skip("ray is not installed (`pip install alf_env[ray]` adds this "
                       "backend)") from None
        if not ray.is_initialized():
            ray.init(num_cpus=usable_cpu_count(), include_dashboard=False,
                     log_to_driver=False)
            cls.started = True

    @classmethod
    def stop(cls) -> None:
        """Shuts down the instance this backend started (not one the user runs)."""
        if cls.started:
            import ray

            ray.shutdown()
            cls.started = False


def _ray_vector_runner(workload: str, num_envs: int, actions: Actions) -> Runner:
    """Runner over ``RayVectorEnv``. A local Ray it had to start is stopped again
    when the runner closes, so Ray's daemons do not run (and take CPU) while the
    other backends are measured."""
    ray_vector_env = _import("alf_env.distributed", "RayVectorEnv",
                             "alf_env.distributed.RayVectorEnv")
    _LocalRay.ensure()
    try:
        runner = _gym_vector_runner(lambda fns: ray_vector_env(fns, num_actors=RAY_ACTORS),
                                    workload, num_envs, actions)
    except BaseException:
        _LocalRay.stop()
        raise

    def close() -> None:
        try:
            runner.close()
        finally:
            _LocalRay.stop()

    return runner._replace(close=close)


def _puffer_env(workload: str, env_id: int, buf: Any = None, seed: int = 0) -> Any:
    """Env ``env_id`` of ``workload`` in PufferLib's gymnasium emulation (a
    picklable constructor; PufferLib passes its shared buffer and seed)."""
    puffer_env = import_from("pufferlib.emulation", "GymnasiumPufferEnv")
    return puffer_env(env_creator=make_env, env_args=[workload, env_id], buf=buf, seed=seed)


def _pufferlib_runner(workload: str, num_envs: int, actions: Actions,
                      num_workers: Optional[int] = None, async_mode: bool = False) -> Runner:
    """Runner over ``pufferlib.vector.Multiprocessing`` (pufferlib-core).

    ``num_workers`` (default: one per usable CPU, PufferLib's advice) must divide
    ``num_envs``; ``async_mode``: each step returns the first half of the envs
    to finish (PufferLib's ``batch_size=num_envs // 2``).
    """
    multiprocessing_backend = _import("pufferlib.vector", "Multiprocessing",
                                      "pufferlib-core (`pip install --no-deps "
                                      "pufferlib-core==3.0.23`)")
    vector = import_from("pufferlib.vector")
    workers = min(num_workers or usable_cpu_count(), num_envs)
    if num_envs % workers:
        raise Skip(f"PufferLib needs num_envs divisible by its {workers} workers")
    batch_size = num_envs // 2 if async_mode else num_envs
    if batch_size < 1 or batch_size % (num_envs // workers):
        raise Skip(f"PufferLib needs batch_size {batch_size} divisible by "
                   f"{num_envs // workers} envs per worker")
    env = vector.make([functools.partial(_puffer_env, workload, i) for i in range(num_envs)],
                      env_args=[[] for _ in range(num_envs)],
                      env_kwargs=[{} for _ in range(num_envs)], num_envs=num_envs,
                      backend=multiprocessing_backend, num_workers=workers,
                      batch_size=batch_size, overwork=True)

    watchdog = _PufferWatchdog(env, vector.MAIN)

    def close() -> None:
        watchdog.stop()
        env.close()  # terminates its workers without reaping them
        for proc in env.processes:
            proc.join(5.0)

    def step(k: int) -> Any:
        out = env.step(batches[k % NUM_ACTIONS])
        watchdog.check()
        return out

    _started(env, lambda: env.reset(seed=ACTION_SEED))
    batches = [b[:batch_size] for b in actions.numpy]
    return Runner(step=step, close=close, env_steps_per_round=batch_size)


class _PufferWatchdog:
    """Ends PufferLib's wait for a worker that died.

    ``Multiprocessing.recv`` spins on its workers' semaphores with no timeout,
    so a dead worker would hang the whole bench. A thread polls the workers;
    when one has exited it marks every worker's semaphore done, which ends the
    spin, and :meth:`check` (after the step) raises, naming the worker.
    """

    POLL_S = 0.2

    def __init__(self, env: Any, done_flag: int) -> None:
        self._env = env
        self._done_flag = done_flag  # pufferlib.vector.MAIN: "your turn, main"
        self._dead: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pufferlib-watchdog",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.POLL_S):
            for i, proc in enumerate(self._env.processes):
                if proc.exitcode is not None:
                    self._dead = f"PufferLib worker {i} exited with code {proc.exitcode}"
                    self._env.buf["semaphores"][:] = self._done_flag
                    return

    def check(self) -> None:
        """Raises ``RuntimeError`` if a worker died."""
        if self._dead is not None:
            raise RuntimeError(self._dead)

    def stop(self) -> None:
        """Ends the thread (bounded; repeat-safe)."""
        self._stop.set()
        self._thread.join(2 * self.POLL_S + 1.0)


def _gym_async(fns: List[Callable[[], gym.Env]]) -> Any:
    return gym.vector.AsyncVectorEnv(fns, shared_memory=True, context="fork")


BuildRunner = Callable[[str, int, Actions], Runner]


class Backend(NamedTuple):
    """One way of batching envs.

    Attributes:
        build: ``build(workload, num_envs, actions)`` returns a started
            :class:`Runner` (or raises :class:`Skip`).
        name: what a user knows it by (the class, and the argument a suffixed
            backend sets), as the tables, the verdict and the plots print it;
            the key in :data:`BACKENDS` is the id ``--backends`` takes.
        label: what it is, in full, for the help text and ``results.md``.
        teardown: called once after the whole run (e.g. stops a local Ray).
    """
    build: BuildRunner
    name: str
    label: str
    teardown: Optional[Callable[[], None]] = None


_FPE = ("alf_env.environments.fast_parallel_environment", "FastParallelEnvironment")
_PAE = ("alf_env.environments.parallel_environment", "ParallelAlfEnvironment")


def _one_per_worker(num_envs: int) -> int:
    return num_envs


#: The one table of backends, in the order they are measured and shown.
BACKENDS: Dict[str, Backend] = {
    "fast": Backend(functools.partial(_alf_runner, *_FPE), "FastParallelEnvironment",
                    "FastParallelEnvironment"),
    "fast_1pw": Backend(functools.partial(_alf_runner, *_FPE, num_workers=_one_per_worker),
                        "FastParallelEnvironment (1 env/worker)",
                        "FastParallelEnvironment, num_workers=num_envs"),
    "fast_spread": Backend(functools.partial(_alf_runner, *_FPE, worker_cpus="spread"),
                           "FastParallelEnvironment (spread)",
                           'FastParallelEnvironment, worker_cpus="spread"'),
    "fast_os": Backend(functools.partial(_alf_runner, *_FPE, worker_cpus=None),
                       "FastParallelEnvironment (OS-placed)",
                       "FastParallelEnvironment, worker_cpus=None (the OS places workers)"),
    "fast_vector": Backend(fast_vector_runner, "FastVectorEnv", "FastVectorEnv"),
    "fast_vector_1pw": Backend(
        functools.partial(fast_vector_runner, num_workers=_one_per_worker),
        "FastVectorEnv (1 env/worker)", "FastVectorEnv, num_workers=num_envs"),
    "fast_vector_epw4": Backend(
        functools.partial(fast_vector_runner, envs_per_worker=ENVS_PER_WORKER),
        f"FastVectorEnv ({ENVS_PER_WORKER} envs/worker)",
        f"FastVectorEnv, envs_per_worker={ENVS_PER_WORKER}"),
    "fast_vector_spread": Backend(
        functools.partial(fast_vector_runner, worker_cpus="spread"),
        "FastVectorEnv (spread)", 'FastVectorEnv, worker_cpus="spread"'),
    "fast_vector_os": Backend(functools.partial(fast_vector_runner, worker_cpus=None),
                              "FastVectorEnv (OS-placed)",
                              "FastVectorEnv, worker_cpus=None (the OS places workers)"),
    "fast_vector_async": Backend(functools.partial(fast_vector_runner, async_mode=True),
                                 "FastVectorEnv (half batch)",
                                 "FastVectorEnv, batch_size=n/2 (EnvPool-style)"),
    "parallel": Backend(functools.partial(_alf_runner, *_PAE), "ParallelAlfEnvironment",
                        "ParallelAlfEnvironment (pipes)"),
    "sb3_alf": Backend(functools.partial(_sb3_runner, _sb3_alf), "FastSubprocVecEnv",
                       "alf_env.sb3.FastSubprocVecEnv"),
    "ray_vector": Backend(_ray_vector_runner, "RayVectorEnv",
                          f"alf_env.distributed.RayVectorEnv, num_actors={RAY_ACTORS}",
                          teardown=_LocalRay.stop),
    "gym_async": Backend(functools.partial(_gym_vector_runner, _gym_async), "AsyncVectorEnv",
                         "gymnasium AsyncVectorEnv"),
    "gym_sync": Backend(functools.partial(_gym_vector_runner, gym.vector.SyncVectorEnv),
                        "SyncVectorEnv", "gymnasium SyncVectorEnv (in-process)"),
    "sb3_subproc": Backend(functools.partial(_sb3_runner, _sb3_subproc), "SubprocVecEnv",
                           "stable-baselines3 SubprocVecEnv"),
    "pufferlib": Backend(_pufferlib_runner, "PufferLib",
                         "PufferLib Multiprocessing, one worker per CPU"),
    "pufferlib_1w": Backend(functools.partial(_pufferlib_runner, num_workers=1),
                            "PufferLib (1 worker)", "PufferLib Multiprocessing, one worker"),
    "pufferlib_async": Backend(functools.partial(_pufferlib_runner, async_mode=True),
                               "PufferLib (half batch)",
                               "PufferLib Multiprocessing, batch_size=n/2"),
    "single": Backend(single_runner, "plain loop (1 env)", "one env, plain loop"),
    "ceiling": Backend(ceiling_runner, "ceiling", "ceiling: one env per usable CPU, separate "
                                                  "processes, plain loops, summed"),
    "bare_loop": Backend(bare_loop_runner, "bare lockstep loop",
                         "bare lockstep loop: one worker per usable CPU, nothing but the "
                         "envs' steps and the native hand-off"),
    "envpool": Backend(envpool_runner, "EnvPool", "EnvPool (C++ envs, one thread per CPU)"),
}
assert all(name in BACKENDS for name in REFERENCES)
assert set(YARDSTICKS) <= set(REFERENCES)
assert len({b.name for b in BACKENDS.values()}) == len(BACKENDS), "two backends, one name"


#: Names ``benchmarks/launch_spread.py`` (and so ``training_loop.json``) gives
#: backends whose bench id is spelled otherwise.
ALIASES = {"fast_parallel": "fast"}


def display_name(backend: str) -> str:
    """The name a user knows ``backend`` by; a name that is no id (a layout of
    ``--tune``) is returned as it is."""
    entry = BACKENDS.get(backend)
    return entry.name if entry is not None else backend
