"""The flat step of an ``AlfGymWrapper`` (see ``AlfGymWrapper.flat_stepper``).

A worker that writes time steps into shared rows (``FastParallelEnvironment``)
or packs them into records (the pipe path) only needs their leaves. The flat
step compiled here does what ``AlfGymWrapper.step()`` does, with the same
conversions, and returns the leaves instead of building a ``TimeStep``; the
env's own float reward and float or bool info entries are returned as they
are, for the rows to store as numpy would convert them
(``_penv._copy_leaves(..., scalars=True)``).
"""

from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from alf_env import nest
from alf_env.environments.gym_conversions import LAST_ARRAY, MID_ARRAY, ZERO_DISCOUNT_ARRAY
from alf_env.nest_compiled import compile_nest

__all__ = ["FlatStep", "compile_flat_step"]

#: The flat step: the flattened action in, ``(the flattened time step,
#: whether it is LAST)`` out, or ``None`` when it did not step.
FlatStep = Callable[[List[np.ndarray]], Optional[Tuple[List[Any], bool]]]


def compile_flat_step(env: Any) -> Optional[FlatStep]:
    """The flat step of ``env``, an ``AlfGymWrapper`` (see its
    ``flat_stepper``, which checks that it is one), or ``None`` if its time
    step does not flatten in field order."""
    time_step_spec = env.time_step_spec()
    paths = [p for p, _ in nest.flatten_with_path(time_step_spec)]

    def under(prefix: str, spec: Any) -> List[str]:
        return [f"{prefix}.{p}" if p else prefix for p, _ in nest.flatten_with_path(spec)]

    env_info_spec = env._env_info_spec
    if paths != (["step_type", "reward", "discount"]
                 + under("observation", env._observation_spec)
                 + under("prev_action", env._action_spec) + ["env_id"]
                 + under("env_info", {} if env_info_spec is None else env_info_spec)):
        return None
    flatten_observation = compile_nest(env._observation_spec)[0]
    flatten_info = compile_nest({} if env_info_spec is None else env_info_spec)[0]
    raw_info = _compile_raw_info(env_info_spec)
    # An empty dict spec selects nothing from any info (what _env_info returns
    # is a new empty dict, which has no leaves): nothing to fetch.
    no_info = type(env_info_spec) is dict and not env_info_spec
    pack_action = compile_nest(env._action_spec)[1]
    gym_env = env._gym_env
    gym_action_space = env._gym_action_space
    to_gym = env._fast_gym_action
    observation_of, reward_of, env_info_of = (env._observation, env._reward,
                                              env._env_info)
    last, mid = LAST_ARRAY, MID_ARRAY
    zero_discount = ZERO_DISCOUNT_ARRAY

    def flat_step(action_leaves: List[np.ndarray]) -> Optional[Tuple[List[Any], bool]]:
        # AlfEnvironment.step() then _step(), minus building the TimeStep.
        if env._closed:
            env._check_not_closed()
        if (env._done and env._auto_reset) or (
                env._current_time_step is None and env._current_leaves is None):
            return None  # a reset: step() does it
        action = pack_action(action_leaves)
        space = gym_env.action_space
        gym_action = (to_gym(action) if space is gym_action_space
                      else env._to_gym_action(space, action))
        observation, reward, terminated, truncated, info = gym_env.step(gym_action)
        env._info = info
        ended = bool(terminated or truncated)
        env._done = ended
        observation = observation_of(observation)
        if type(reward) is not float and type(reward) is not np.float64:
            reward = reward_of(reward)  # else left as is (see the docstring)
        info_leaves = raw_info(info) if raw_info is not None else None
        if info_leaves is None and not no_info:
            env_info = env_info_of(info)
            if env_info is not None and (type(env_info) is not dict or env_info):
                info_leaves = flatten_info(env_info)
        # The cached 0-d arrays themselves (the caller copies the leaves),
        # unless the attribute they were made from was replaced.
        if terminated:
            discount = zero_discount
        else:
            source, discount = env._discount_array
            if source is not env._discount:
                discount = env._fresh_discount()
        source, env_id = env._env_id_array
        if source is not env._env_id:
            env_id = env._fresh_env_id()
        leaves = [last if ended else mid, reward, discount]
        leaves += flatten_observation(observation)
        leaves += action_leaves
        leaves.append(env_id)
        if info_leaves is not None:
            leaves += info_leaves
        env._current_leaves = leaves
        return leaves, ended

    return flat_step


def _compile_raw_info(spec: Any) -> Optional[Callable[[Any], Optional[List[Any]]]]:
    """The info entries as the env gave them, for a flat dict of 0-d float and
    bool specs: each entry must be a Python float or numpy float64 or float32
    (float specs; a float32 is passed on as the Python float of its value,
    which it converts to and from exactly) or a Python bool (bool specs),
    which the rows store exactly as ``_env_info`` converts them; ``None`` (per
    info) otherwise, and ``None`` for other specs."""
    if type(spec) is not dict or not spec:
        return None
    try:
        keys = sorted(spec)
    except TypeError:
        return None
    allowed: List[Tuple[Any, Tuple[type, ...]]] = []
    for key in keys:
        leaf = spec[key]
        if nest.is_nested(leaf) or tuple(leaf.shape) != ():
            return None
        dtype = leaf.numpy_dtype
        if dtype.kind == "f" and dtype.itemsize in (4, 8):
            allowed.append((key, (float, np.float64, np.float32)))
        elif dtype.kind == "b":
            allowed.append((key, (bool,)))
        else:
            return None

    def raw(info: Any) -> Optional[List[Any]]:
        if type(info) is not dict:
            return None
        leaves = []
        for key, types in allowed:
            value: Any = info.get(key)
            kind = type(value)
            if kind not in types:
                return None
            leaves.append(float(value) if kind is np.float32 else value)
        return leaves

    return raw
