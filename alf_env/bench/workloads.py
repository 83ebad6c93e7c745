"""The benchmark's workloads: synthetic envs and real ones, by name.

- ``W1`` ... ``W4`` and the sweep ``S10`` ... ``S1000``: the synthetic envs of
  :mod:`alf_env.bench.synthetic_envs` (no package beyond gymnasium).
- ``HalfCheetah-v5``: gymnasium's MuJoCo env (needs ``mujoco``).
- ``Pong``: ``ALE/Pong-v5`` with ``frameskip=1, repeat_action_probability=0``
  in ``AtariPreprocessing(frame_skip=4, screen_size=84, grayscale_obs=True)``
  and ``FrameStackObservation(4)``, i.e. EnvPool's default Atari preprocessing
  (needs ``ale_py``, which ships the ROMs, and ``cv2``).
- ``CartPole-v1``: gymnasium's classic-control env.

Any other registered gymnasium id is made with ``gymnasium.make``, and a
``module:function`` names a constructor of the user's own (``function()``
returns a ``gymnasium.Env``; the module is imported in every worker). The
constructors are module-level functions, so ``functools.partial(make_env,
name, i)`` pickles for spawned workers, and this module does not import
torch. ``pip install alf_env[bench]`` installs the packages of the real
workloads; a workload whose packages are missing is reported as skipped.
"""

import functools
import importlib.util
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import gymnasium as gym

from alf_env.bench.synthetic_envs import SWEEP_MICROSECONDS, SYNTHETIC_ENVS, make_synthetic_env
from alf_env.lazy_import import import_from

#: The name ``--workload`` expands to every sweep workload.
SWEEP = "sweep"
SWEEP_NAMES = tuple(f"S{us}" for us in SWEEP_MICROSECONDS)
INSTALL_HINT = "pip install alf_env[bench]"


def make_half_cheetah() -> gym.Env:
    """gymnasium's ``HalfCheetah-v5`` (MuJoCo), default arguments."""
    return gym.make("HalfCheetah-v5")


def make_pong() -> gym.Env:
    """Pong with EnvPool's default preprocessing, built from gymnasium wrappers.

    Registers ``ale_py``'s envs first, so it works in a fresh (spawned) process.
    """
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84,
                                          grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


def make_cartpole() -> gym.Env:
    """gymnasium's ``CartPole-v1``."""
    return gym.make("CartPole-v1")


class Workload(NamedTuple):
    """One benchmark workload.

    Attributes:
        make: ``make(env_id)`` returns a fresh gymnasium env.
        title: a line saying what it is (plot titles, ``--help``).
        requires: modules it needs beyond gymnasium (import names).
        envpool_id: EnvPool's id of the same env, or ``None`` (no ``envpool`` row).
        num_envs: env counts of a full run.
    """
    make: Callable[[int], gym.Env]
    title: str
    requires: Tuple[str, ...] = ()
    envpool_id: Optional[str] = None
    num_envs: Tuple[int, ...] = (8,)


def _ignore_id(make: Callable[[], gym.Env], env_id: int = 0) -> gym.Env:
    return make()


def _real(make: Callable[[], gym.Env]) -> Callable[[int], gym.Env]:
    return functools.partial(_ignore_id, make)


def _synthetic(name: str) -> Callable[[int], gym.Env]:
    return functools.partial(make_synthetic_env, name)


#: Every named workload, in the order of a full run.
WORKLOADS: Dict[str, Workload] = {
    "W1": Workload(_synthetic("W1"), "W1: trivial env (float32[4])", num_envs=(2, 4, 8, 16)),
    "W2": Workload(_synthetic("W2"), "W2: 84x84x4 uint8 frames", num_envs=(4, 8, 16)),
    "W3": Workload(_synthetic("W3"), "W3: ~1 ms of CPU per step", num_envs=(2, 4, 8)),
    "W4": Workload(_synthetic("W4"), "W4: 0.2-2 ms of CPU per step"),
    "CartPole-v1": Workload(_real(make_cartpole), "CartPole-v1 (gymnasium)",
                            envpool_id="CartPole-v1"),
    "HalfCheetah-v5": Workload(_real(make_half_cheetah), "HalfCheetah-v5 (MuJoCo)",
                               requires=("mujoco",), envpool_id="HalfCheetah-v5"),
    "Pong": Workload(_real(make_pong), "Pong: ALE/Pong-v5, 84x84x4 (EnvPool's preprocessing)",
                     requires=("ale_py", "cv2"), envpool_id="Pong-v5"),
    **{name: Workload(_synthetic(name), f"{name}: {name[1:]} µs of CPU per step, 4-key info")
       for name in SWEEP_NAMES},
}
assert set(SYNTHETIC_ENVS) <= set(WORKLOADS), "a synthetic workload has no bench entry"


def expand(names: Sequence[str]) -> List[str]:
    """``names`` with ``"sweep"`` replaced by ``S10`` ... ``S1000`` (duplicates dropped)."""
    out: List[str] = []
    for name in names:
        out += list(SWEEP_NAMES) if name == SWEEP else [name]
    return list(dict.fromkeys(out))


def get(name: str) -> Workload:
    """The workload called ``name``: a named one, a registered gymnasium id or a
    ``module:function`` constructor.

    Raises:
        ValueError: ``name`` is none of these, or its constructor does not import.
    """
    if name in WORKLOADS:
        return WORKLOADS[name]
    try:
        gym.spec(name)  # gymnasium's own "module:EnvId-v0" included
    except (gym.error.Error, ImportError) as err:
        if ":" not in name:
            raise ValueError(f"workload {name!r} is neither one of {','.join(WORKLOADS)} "
                             f"(or {SWEEP!r}), a registered gymnasium id ({err}), nor a "
                             f"module:function constructor") from None
        constructor(name)  # fails here, with the reason, rather than in every worker
        return Workload(functools.partial(_call, name), f"{name} (your constructor)")
    return Workload(functools.partial(_gym_make, name), f"{name} (gymnasium)")


def constructor(spec: str) -> Callable[[], gym.Env]:
    """The function ``module:function`` names.

    Raises:
        ValueError: the module does not import or has no such callable.
    """
    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise ValueError(f"{spec!r}: expected module:function")
    try:
        target: object = import_from(module_name)
    except ImportError as err:
        raise ValueError(f"{spec!r}: cannot import {module_name!r} ({err}); is it on "
                         f"sys.path (PYTHONPATH)?") from None
    for part in function.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ValueError(f"{spec!r}: {module_name!r} has no callable {function!r}")
    return target


def _call(spec: str, env_id: int = 0) -> gym.Env:
    return constructor(spec)()


def _gym_make(name: str, env_id: int = 0) -> gym.Env:
    return gym.make(name)


def make_env(name: str, env_id: int = 0) -> gym.Env:
    """A fresh env of workload ``name`` (picklable as ``partial(make_env, name, i)``)."""
    return get(name).make(env_id)


def missing_packages(name: str) -> List[str]:
    """The modules workload ``name`` needs that are not installed (``[]``: it can run)."""
    return [m for m in get(name).requires if importlib.util.find_spec(m) is None]


def missing_note(name: str) -> Optional[str]:
    """Why workload ``name`` cannot run here, or ``None`` if it can."""
    missing = missing_packages(name)
    if not missing:
        return None
    return f"not installed: {', '.join(missing)} (`{INSTALL_HINT}` adds this workload)"
