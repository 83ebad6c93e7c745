"""The worker side of :class:`alf_env.sb3.FastSubprocVecEnv`: Sb3Env and its Port (apart,
so that a worker imports stable-baselines3 only for an old ``gym`` env SB3 must patch)."""

import enum
from typing import Any, Callable, Dict, List, Tuple, Type

import gymnasium as gym

#: The vector env's calls reach an env's :class:`Port` by this name.
PORT_ATTR = "_alf_env_sb3_port"


class _Key(enum.Enum):
    """Info keys of :class:`Sb3Env` (no env's own key can equal one)."""
    RESET_INFO = "reset_info"


#: The key under which :meth:`Sb3Env.reset` returns the env's reset info.
RESET_INFO = _Key.RESET_INFO


class Port:
    """Runs SB3's per-env requests on one env (its outermost wrapper), in its worker."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self._staged: List[Any] = []  # the next step's action, as the user gave it

    def __call__(self, op: str, times: int, *args: Any) -> List[Any]:
        """``op(*args)`` run ``times`` times (SB3's ``indices`` may name an env twice)."""
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

    def env_method(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        return self.env.get_wrapper_attr(name)(*args, **kwargs)

    def is_wrapped(self, wrapper_class: Type[gym.Wrapper]) -> bool:
        """SB3's ``is_wrapped``: some wrapper in the chain is a ``wrapper_class``."""
        env = self.env
        while isinstance(env, gym.Wrapper):
            if isinstance(env, wrapper_class):
                return True
            env = env.env
        return False

    def stage(self, action: Any) -> None:
        """Makes the next step use ``action`` instead of the one in the shared rows."""
        self._staged[:] = [action]

    def unstage(self) -> None:
        """Forgets a staged action (its step was not posted)."""
        self._staged.clear()

    def action_for(self, action: Any) -> Any:
        """The action of this step: the staged one (used up), else ``action``."""
        return self._staged.pop() if self._staged else action


class Sb3Env:
    """What a worker hosts for each SB3 env: the env, unwrapped so that its ``spec`` and
    wrappers stay as SB3 shows them, and its :class:`Port` (:data:`PORT_ATTR`)."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.port = Port(env)

    def step(self, action: Any) -> Any:
        """The env's step (of the port's staged action, if any), with SB3's
        ``info["TimeLimit.truncated"]`` set in the env's own info dict (``TypeError`` if none)."""
        obs, reward, terminated, truncated, info = self.env.step(self.port.action_for(action))
        if not isinstance(info, dict):
            raise TypeError(f"step() returned an info of type {type(info).__name__}; "
                            f"expected a dict (SB3 sets its 'TimeLimit.truncated' in it)")
        info["TimeLimit.truncated"] = truncated and not terminated
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        """The env's reset, its info under :data:`RESET_INFO`, where the ``SAME_STEP``
        autoreset's merge cannot collide with ``final_obs`` or ``final_info``."""
        obs, info = self.env.reset(**kwargs)
        return obs, {RESET_INFO: info}

    def get_wrapper_attr(self, name: str) -> Any:
        return self.port if name == PORT_ATTR else self.env.get_wrapper_attr(name)

    def __getattr__(self, name: str) -> Any:
        if name in ("env", "port"):  # not set yet (e.g. during unpickling)
            raise AttributeError(name)
        return getattr(self.env, name)


def build_env(env_fn: Callable[[], gym.Env]) -> Sb3Env:
    """Builds an env in its worker as SB3 does (patching an old ``gym`` env)."""
    env = env_fn()
    if not isinstance(env, gym.Env):
        from stable_baselines3.common.vec_env.patch_gym import _patch_env
        env = _patch_env(env)
    return Sb3Env(env)
