"""Creating batched environments from a name, as ALF trainers do."""

import functools
from typing import Any, Callable, Dict, Optional, Sequence

from alf_env.control_plane.restart import RestartPolicy
from alf_env.environments import suite_gym
from alf_env.environments.alf_environment import AlfEnvironment
from alf_env.environments.alf_wrappers import BatchEnvironmentWrapper


def _default_parallel_ctor() -> Callable[..., AlfEnvironment]:
    # Imported lazily: the native backend is optional at import time.
    try:
        from alf_env.front_ends.alf.fast_parallel_environment import FastParallelEnvironment
        return FastParallelEnvironment
    except ImportError:
        from alf_env.front_ends.alf.parallel_environment import ParallelAlfEnvironment
        return ParallelAlfEnvironment


def create_environment(env_name: str = "CartPole-v1",
                       env_load_fn: Callable[..., AlfEnvironment] = suite_gym.load,
                       num_parallel_environments: int = 8, nonparallel: bool = False,
                       flatten: bool = True, start_serially: bool = True, num_spare_envs: int = 0,
                       torch_num_threads_per_env: int = 1,
                       parallel_environment_ctor: Optional[Callable[..., AlfEnvironment]] = None,
                       seed: Optional[int] = None, batch_size_per_env: int = 1,
                       start_method: str = "fork", restart_policy: Optional[RestartPolicy] = None,
                       **load_kwargs: Any) -> AlfEnvironment:
    """Creates a batched environment of ``num_parallel_environments`` envs.

    Args:
        env_name: passed to ``env_load_fn`` (a gymnasium id for ``suite_gym.load``).
        env_load_fn: ``env_load_fn(env_name, env_id=i, **load_kwargs)`` makes env ``i``.
        num_parallel_environments: size of the batch (spares not included).
        nonparallel: run every env in this process (a ``BatchEnvironmentWrapper``).
        num_spare_envs: ``num_spare_envs_for_reload`` of the batched class.
        parallel_environment_ctor: the batched class (default: the fast one, if built).
        seed: if given, env ``i`` is seeded with ``seed * n + i`` (``n`` counting spares).
        batch_size_per_env: envs per worker, as one ``BatchEnvironmentWrapper``.
        restart_policy: passed to the batched class if not ``None``.
    """
    if num_parallel_environments < 1:
        raise ValueError(f"num_parallel_environments: expected >= 1, got "
                         f"{num_parallel_environments}")
    if batch_size_per_env < 1:
        raise ValueError(f"batch_size_per_env: expected >= 1, got {batch_size_per_env}")
    if nonparallel and restart_policy is not None:
        raise ValueError("restart_policy: nonparallel=True runs every env in this process, "
                         "with no worker to restart; give None or nonparallel=False")
    if nonparallel:
        envs = [env_load_fn(env_name, env_id=i, **load_kwargs)
                for i in range(num_parallel_environments * batch_size_per_env)]
        env: AlfEnvironment = BatchEnvironmentWrapper(envs)
        if seed is not None:
            env.seed(seed)
        return env
    num_envs = num_parallel_environments + num_spare_envs
    ctors: Sequence[Callable[..., AlfEnvironment]]
    if batch_size_per_env == 1:
        ctors = [functools.partial(env_load_fn, env_name, env_id=i, **load_kwargs)
                 for i in range(num_envs)]
    else:
        ctors = [functools.partial(_load_batch, env_load_fn, env_name,
                                   range(i * batch_size_per_env,
                                         (i + 1) * batch_size_per_env), load_kwargs)
                 for i in range(num_envs)]
    ctor = parallel_environment_ctor or _default_parallel_ctor()
    # Passed only when given: a custom class need not take it.
    restart = {} if restart_policy is None else {"restart_policy": restart_policy}
    env = ctor(ctors, start_serially=start_serially, flatten=flatten,
               num_spare_envs_for_reload=num_spare_envs,
               torch_num_threads_per_env=torch_num_threads_per_env,
               start_method=start_method, **restart)
    if seed is not None:
        try:
            env.seed([seed * num_envs + i for i in range(num_envs)])
        except BaseException:
            env.close()
            raise
    return env


def _load_batch(env_load_fn: Callable[..., AlfEnvironment], env_name: str,
                env_ids: range, load_kwargs: Dict[str, Any]) -> BatchEnvironmentWrapper:
    return BatchEnvironmentWrapper(
        [env_load_fn(env_name, env_id=i, **load_kwargs) for i in env_ids])
