"""The worker side of :class:`alf_env.sb3.FastSubprocVecEnv`.

Kept apart from :mod:`alf_env.sb3` so that a worker started with spawn or
forkserver does not import stable-baselines3 (and torch with it) unless an
env needs SB3's patching of old ``gym`` envs.
"""

from typing import Any, Callable, Sequence, Type

import gymnasium as gym

#: Name of the dispatcher attribute each env gets in its worker.
PORT_ATTR = "_alf_env_sb3_port"


class _NotTargeted:
    """Marks the result of an env that a request did not name."""

    def __reduce__(self) -> str:
        return "NOT_TARGETED"  # one instance, also after pickling


NOT_TARGETED = _NotTargeted()


class Port:
    """Runs SB3's per-env requests on one env, in its worker process.

    Args:
        env: the env (the outermost wrapper).
        index: the env's index in the vector env.
    """

    def __init__(self, env: gym.Env, index: int) -> None:
        self.env = env
        self.index = index

    def __call__(self, op: str, indices: Sequence[int], *args: Any) -> Any:
        """The results of ``op`` for each time ``indices`` names this env, else
        :data:`NOT_TARGETED`."""
        times = sum(1 for i in indices if i == self.index)
        if not times:
            return NOT_TARGETED
        return [getattr(self, op)(*args) for _ in range(times)]

    def get_attr(self, name: str) -> Any:
        return self.env.get_wrapper_attr(name)

    def has_attr(self, name: str) -> bool:
        try:
            self.env.get_wrapper_attr(name)
        except AttributeError:
            return False
        return True

    def set_attr(self, name: str, value: Any) -> None:
        setattr(self.env, name, value)  # on the outermost wrapper, as SB3 does

    def env_method(self, name: str, args: tuple, kwargs: dict) -> Any:
        return self.env.get_wrapper_attr(name)(*args, **kwargs)

    def is_wrapped(self, wrapper_class: Type[gym.Wrapper]) -> bool:
        """SB3's ``is_wrapped``: some wrapper in the chain is a ``wrapper_class``."""
        env = self.env
        while isinstance(env, gym.Wrapper):
            if isinstance(env, wrapper_class):
                return True
            env = env.env
        return False


def build_env(env_fn: Callable[[], gym.Env], index: int) -> gym.Env:
    """Builds env ``index`` in its worker as SB3 does (an old ``gym`` env is patched
    by SB3) and gives it its :class:`Port`."""
    env = env_fn()
    if not isinstance(env, gym.Env):
        from stable_baselines3.common.vec_env.patch_gym import _patch_env
        env = _patch_env(env)
    setattr(env, PORT_ATTR, Port(env, index))
    return env
