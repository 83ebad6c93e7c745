"""Wraps a ``gymnasium.Env`` as an (unbatched) :class:`AlfEnvironment`.

Episode ends and specs: docs/contract.rst ("Environments") and docs/migration.rst.
Actions reach the gymnasium env in its space's dtype (a numpy scalar for ``Discrete``).

``env_info`` rule: batched time steps need a fixed layout, so info dicts are reduced to
their fixed-size numeric entries. A probe when the wrapper is made (``reset()``, then one
``step()`` with a fixed valid action) keeps every entry of the two info dicts that
``np.asarray`` makes a bool, integer or float array (nested dicts stay nested); keys
sorted, they form ``env_info_spec()``. Every time step then reports those entries, cast
to the spec dtype: a missing one as zeros, a changed shape raises ``ValueError``, new ones
are ignored. Pass ``env_info_spec`` to skip the probe; ``get_info()`` has the whole dict.
"""

import functools
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import gymnasium
import numpy as np
from gymnasium import spaces

from alf_env import nest
from alf_env.data_structures import (
    TimeStep,
    restart,
    scalar_array,
    termination,
    transition,
    truncation,
)
from alf_env.environments.alf_environment import AlfEnvironment, forward_attribute
from alf_env.environments.gym_conversions import (
    FIRST_ARRAY,
    LAST_ARRAY,
    MID_ARRAY,
    ONE_DISCOUNT_ARRAY,
    ZERO_DISCOUNT_ARRAY,
    Converter,
    action_leaf,
    compile_gym_action,
    compile_info,
    compile_raw_info,
    compile_structure,
    compile_zeros,
    fetch_info,
    info_spec,
    merge_info_specs,
    observation_leaf,
    spec_array,
    to_numpy,
)
from alf_env.environments.gym_space_specs import tensor_spec_from_gym_space
from alf_env.tensor_specs import TensorSpec

__all__ = ["AlfGymWrapper", "FlatStep", "FlatSteps", "flat_steps_of", "tensor_spec_from_gym_space"]

#: The flattened action in, ``(the flattened time step, is LAST)`` out, or ``None``.
FlatStep = Callable[[List[np.ndarray]], Optional[Tuple[List[Any], bool]]]


class FlatSteps(NamedTuple):
    """A plain :class:`AlfGymWrapper`'s step and reset on flattened nests."""

    step: FlatStep
    reset: Callable[[], List[Any]]  # returns the FIRST time step's leaves


#: ``(step_type, reward, discount, observation, env_id, info, terminated)``.
GymStepResult = Tuple[np.ndarray, Any, np.ndarray, Any, np.ndarray, Any, bool]

# Set by AlfGymWrapper._compile; closures, left out of pickles.
_COMPILED_ATTRIBUTES = ("_fast_observation", "_fast_action", "_fast_zero_action",
                        "_fast_env_info", "_gym_action_space", "_fast_gym_action",
                        "_direct_time_steps", "_direct_gym_action", "_discount_array",
                        "_env_id_array", "_gym_action", "_gym_step")


def flat_steps_of(env: AlfEnvironment) -> Optional[FlatSteps]:
    """``env.flat_steps()`` (see ``AlfGymWrapper``), or ``None`` if it has none."""
    make = getattr(type(env), "flat_steps", None)
    return make(env) if callable(make) else None


def _is_inherited(obj: Any, name: str) -> bool:
    """Whether ``obj``'s class uses ``AlfGymWrapper``'s own method ``name``."""
    return getattr(type(obj), name) is getattr(AlfGymWrapper, name)


class AlfGymWrapper(AlfEnvironment):
    """An :class:`AlfEnvironment` over a ``gymnasium.Env`` (unknown public attributes are the
    gymnasium env's); its specs are compiled into conversions: do not change them."""

    def __init__(self, gym_env: gymnasium.Env, env_id: Optional[int] = None,
                 discount: float = 1.0, auto_reset: bool = True,
                 env_info_spec: Optional[Any] = None, *, simplify_box_bounds: bool = True,
                 float_dtype: Optional[Any] = np.float32) -> None:
        """Wraps ``gym_env`` (owned: ``close()`` closes it).

        Args:
            env_id: id reported in ``TimeStep.env_id`` (0 if ``None``).
            discount: discount of ``MID`` steps and of truncated ``LAST`` steps.
            auto_reset: reset on the step after ``LAST``; if ``False`` that step goes to
                the gymnasium env as is.
            env_info_spec: dict of ``TensorSpec`` for ``env_info``; ``None``: the probe's.
            simplify_box_bounds, float_dtype: as :func:`tensor_spec_from_gym_space` (the
                dtype of floating spaces is also the observations').

        Raises:
            TypeError: if a space has no spec equivalent.
        """
        super().__init__()
        self._gym_env = gym_env
        self._env_id = np.int32(0 if env_id is None else env_id)
        self._discount = np.float32(discount)
        self._auto_reset = auto_reset
        self._observation_spec = tensor_spec_from_gym_space(
            gym_env.observation_space, simplify_box_bounds, float_dtype)
        self._action_spec = tensor_spec_from_gym_space(
            gym_env.action_space, simplify_box_bounds, float_dtype)
        self._pending_seed: Optional[int] = None
        self._info: Any = None
        self._done = True
        # The last flat step's leaves, packed by current_time_step() only when asked.
        self._current_leaves: Optional[List[Any]] = None
        self._leaf_specs: Optional[Tuple[TimeStep, List[np.dtype]]] = None
        # No compiled conversions yet: the probe below takes the general path.
        self._fast_gym_action: Optional[Converter] = None
        self._gym_action_space: Optional[spaces.Space[Any]] = None
        if env_info_spec is None:
            env_info_spec = self._probe_env_info_spec()
        self._env_info_spec = env_info_spec
        self._compile()

    def _compile(self) -> None:
        self._fast_observation = compile_structure(self._observation_spec, observation_leaf)
        self._fast_action = compile_structure(self._action_spec, action_leaf)
        self._fast_zero_action = compile_zeros(self._action_spec)
        self._fast_env_info = compile_info(self._env_info_spec)
        self._gym_action_space = self._gym_env.action_space
        self._fast_gym_action = compile_gym_action(self._gym_action_space)
        # Time steps are built directly, not by restart() / transition() ..., when this
        # class's conversions make what those assume; a subclass's may not.
        self._direct_time_steps = (_is_inherited(self, "_observation")
                                   and _is_inherited(self, "_reward"))
        self._direct_gym_action = _is_inherited(self, "_to_gym_action")
        # (source, array): re-made should the attribute ever be replaced.
        self._discount_array = (self._discount, scalar_array(self._discount, np.float32))
        self._env_id_array = (self._env_id, scalar_array(self._env_id, np.int32))
        self._choose_gym_action()
        self._gym_step = self._compile_gym_step()

    def _choose_gym_action(self) -> None:
        """Chooses how actions reach the gymnasium env until its next reset: an env replaces
        its action space only then, and reading it costs a chain of wrappers' properties."""
        space = self._gym_env.action_space
        if space is self._gym_action_space and self._direct_gym_action:
            self._gym_action: Converter = self._fast_gym_action  # type: ignore[assignment]
        else:
            self._gym_action = functools.partial(self._to_gym_action, space)

    def __getstate__(self) -> Dict[str, Any]:
        """Everything but the compiled conversions (closures), compiled again on unpickling."""
        state = self.__dict__.copy()
        for name in _COMPILED_ATTRIBUTES:
            state.pop(name, None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compile()

    # ----- probing ----------------------------------------------------------
    def _probe_env_info_spec(self) -> Dict[Any, Any]:
        _, reset_info = self._gym_env.reset()
        # Read before the step: an env may reuse its info dict and refill it in step().
        reset_spec = info_spec(reset_info)
        # A valid, deterministic action: 0 clipped into the action bounds.
        fixed = nest.map_structure(
            lambda s: np.clip(s.numpy_zeros(), s.minimum, s.maximum).astype(s.numpy_dtype),
            self._action_spec)
        *_, step_info = self._gym_env.step(self._to_gym_action(self._gym_env.action_space, fixed))
        return merge_info_specs(reset_spec, info_spec(step_info))

    # ----- AlfEnvironment API -----------------------------------------------
    @property
    def gym_env(self) -> gymnasium.Env:
        """The wrapped gymnasium env."""
        return self._gym_env

    gym = gym_env  # ALF's name

    def get_info(self) -> Any:
        """The gymnasium info dict of the last ``step``, as is; ``None`` after a reset."""
        return self._info

    @property
    def done(self) -> bool:
        """Whether the last step ended the episode (ALF's property)."""
        return self._done

    def sync_progress(self, progress: Any = None) -> None:
        """Forwards ``progress`` to the gymnasium env (or its unwrapped env) if it has one."""
        for env in (self._gym_env, self._gym_env.unwrapped):
            sync = getattr(env, "sync_progress", None)
            if callable(sync):
                sync(progress)
                return

    def observation_spec(self) -> Any:
        """The spec nest of ``observation_space``."""
        return self._observation_spec

    def action_spec(self) -> Any:
        """The spec nest of ``action_space``."""
        return self._action_spec

    def env_info_spec(self) -> Any:
        """The spec of the numeric info entries (see the module docstring)."""
        return self._env_info_spec

    def seed(self, seed: int) -> None:
        """Seeds the next gymnasium ``reset`` (and the action space)."""
        self._pending_seed = int(seed)
        self._gym_env.action_space.seed(int(seed))

    def render(self, mode: str = "rgb_array") -> Any:
        """Returns ``gym_env.render()``; ``mode`` must be the one the env was made with."""
        render_mode = getattr(self._gym_env, "render_mode", None)
        if render_mode != mode:
            raise ValueError(f"render: the gymnasium env was made with render_mode={render_mode!r} "
                             f"but render was asked for mode {mode!r}; pass "
                             f"render_mode={mode!r} when making the env")
        return self._gym_env.render()

    def _close(self) -> None:
        self._gym_env.close()

    def __getattr__(self, name: str) -> Any:
        return forward_attribute(self, "_gym_env", name)

    def current_time_step(self) -> Optional[TimeStep]:
        """The last ``TimeStep`` returned (by ``step()``, ``reset()`` or a flat step)."""
        leaves = self._current_leaves
        if leaves is not None:
            self._current_leaves = None
            if self._leaf_specs is None:  # hundreds of µs: made once
                spec = self.time_step_spec()
                self._leaf_specs = (spec, [s.numpy_dtype for s in nest.flatten(spec)])
            spec, dtypes = self._leaf_specs
            self._current_time_step = nest.pack_sequence_as(spec, [
                np.array(leaf, dtype=dtype) for leaf, dtype in zip(leaves, dtypes)])
        return super().current_time_step()

    def _has_time_step(self) -> bool:
        return self._current_leaves is not None or self._current_time_step is not None

    def flat_steps(self) -> Optional["FlatSteps"]:
        """A step and a reset on flattened nests, for a worker that writes them into shared rows
        (it would only take apart the ``TimeStep`` that ``step()`` builds).

        ``step`` takes the action's leaves (views of the action rows, not kept) and returns
        ``(the time step's leaves, is_last)``, or ``None`` when the step is a reset (call
        ``step()``); ``reset`` returns the ``FIRST`` leaves. A 0-d leaf may be a Python or
        numpy scalar; some are shared constants, to be copied before the next step.

        Returns:
            the two, or ``None`` for a subclass (it may convert differently) or specs
            whose time step does not flatten in field order.
        """
        if type(self) is not AlfGymWrapper or not (self._direct_time_steps
                                                   and self._direct_gym_action):
            return None

        def under(prefix: str, spec: Any) -> List[str]:
            return [nest.field_name(prefix, p) for p, _ in nest.flatten_with_path(spec)]

        if [p for p, _ in nest.flatten_with_path(self.time_step_spec())] != (
                ["step_type", "reward", "discount"]
                + under("observation", self._observation_spec)
                + under("prev_action", self._action_spec) + ["env_id"]
                + under("env_info", self._env_info_spec)):
            return None
        flatten_observation = nest.compile_nest(self._observation_spec)[0]
        flatten_info = nest.compile_nest(self._env_info_spec)[0]
        raw_info = compile_raw_info(self._env_info_spec)
        no_info = type(self._env_info_spec) is dict and not self._env_info_spec
        pack_action = nest.compile_nest(self._action_spec)[1]
        single_action = not nest.is_nested(self._action_spec)
        single_observation = not nest.is_nested(self._observation_spec)
        # A single Discrete action reaches the env as a numpy scalar anyway: read one from
        # the row (when the spec's dtype is the space's), with no copy.
        scalar_action = (single_action
                         and isinstance(self._gym_action_space, spaces.Discrete)
                         and self._action_spec.numpy_dtype == self._gym_action_space.dtype)
        gym_step, reward_of, env_info_of = self._gym_step, self._reward, self._env_info
        last = LAST_ARRAY

        def info_leaves_of(env_info: Any) -> Optional[List[Any]]:
            if env_info is not None and (type(env_info) is not dict or env_info):
                return flatten_info(env_info)
            return None

        def flat_step(action_views: List[np.ndarray]) -> Optional[Tuple[List[Any], bool]]:
            # AlfEnvironment.step() then _step(), with leaves for the TimeStep.
            if self._closed:
                self._check_not_closed()
            if (self._done and self._auto_reset) or (
                    self._current_leaves is None and self._current_time_step is None):
                return None  # a reset: step() does it (see _has_time_step)
            if single_action:
                view = action_views[0]
                action = view[()] if scalar_action else np.array(view)
                action_leaves = [action]
            else:
                action_leaves = [np.array(view) for view in action_views]
                action = pack_action(action_leaves)
            step_type, reward, discount, observation, env_id, info, _ = gym_step(action)
            if type(reward) is not float and type(reward) is not np.float64:
                reward = reward_of(reward)  # else left as is (see the docstring)
            info_leaves = raw_info(info) if raw_info is not None else None
            if info_leaves is None and not no_info:
                info_leaves = info_leaves_of(env_info_of(info))
            if single_observation:
                leaves = [step_type, reward, discount, observation]
            else:
                leaves = [step_type, reward, discount]
                leaves += flatten_observation(observation)
            leaves += action_leaves
            leaves.append(env_id)
            if info_leaves is not None:
                leaves += info_leaves
            self._current_leaves = leaves
            return leaves, step_type is last

        # reset()'s prev_action, read-only: shared by every FIRST time step's leaves.
        zero_action = [spec.numpy_zeros() for spec in nest.flatten(self._action_spec)]
        for leaf in zero_action:
            leaf.flags.writeable = False
        gym_reset, env_id_leaf = self._gym_reset, self._env_id_leaf

        def flat_reset() -> List[Any]:
            # AlfEnvironment.reset() then _reset(), with leaves for the TimeStep.
            if self._closed:
                self._check_not_closed()
            observation, env_info = gym_reset()
            leaves = [FIRST_ARRAY, 0.0, ONE_DISCOUNT_ARRAY]
            if single_observation:
                leaves.append(observation)
            else:
                leaves += flatten_observation(observation)
            leaves += zero_action
            leaves.append(env_id_leaf())
            info_leaves = info_leaves_of(env_info)
            if info_leaves is not None:
                leaves += info_leaves
            self._current_leaves = leaves
            return leaves

        return FlatSteps(flat_step, flat_reset)

    # ----- conversions --------------------------------------------------------
    def _observation(self, observation: Any) -> Any:
        convert = self._fast_observation
        if convert is not None:
            try:
                return convert(observation)
            except Exception:  # noqa: BLE001 -- not the common case: the general path decides
                pass
        return self._observation_general(observation)

    def _observation_general(self, observation: Any) -> Any:
        try:
            nest.assert_same_structure(self._observation_spec, observation, check_types=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"observation returned by the gymnasium env does not match the "
                             f"observation space: {err}") from None
        return nest.map_structure(lambda s, x: np.asarray(to_numpy(x), dtype=s.numpy_dtype),
                                  self._observation_spec, observation, check_types=False)

    def _action_arrays(self, action: Any) -> Any:
        convert = self._fast_action
        if convert is not None:
            try:
                return convert(action)
            except Exception:  # noqa: BLE001 -- not the common case: the general path decides
                pass
        return self._action_arrays_general(action)

    def _action_arrays_general(self, action: Any) -> Any:
        try:
            nest.assert_same_structure(self._action_spec, action, check_types=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"action does not match the action spec: {err}") from None

        def convert(path: str, spec: TensorSpec, leaf: Any) -> np.ndarray:
            return spec_array(spec, leaf, nest.field_name("action", path),
                              f" and dtype {spec.numpy_dtype}")

        return nest.map_structure_with_path(convert, self._action_spec, action, check_types=False)

    def _to_gym_action(self, space: spaces.Space[Any], action: Any) -> Any:
        if space is self._gym_action_space and self._fast_gym_action is not None:
            return self._fast_gym_action(action)
        if isinstance(space, spaces.Dict):
            return {k: self._to_gym_action(s, action[k]) for k, s in space.spaces.items()}
        if isinstance(space, spaces.Tuple):
            return tuple(self._to_gym_action(s, a) for s, a in zip(space.spaces, action))
        if isinstance(space, spaces.Discrete):
            return np.asarray(action, dtype=space.dtype).reshape(())[()]
        return np.asarray(action, dtype=space.dtype)

    def _env_info(self, info: Any) -> Any:
        fetch = self._fast_env_info
        if fetch is not None:
            try:
                return fetch(info)
            except Exception:  # noqa: BLE001 -- not the common case: the general path decides
                pass
        return fetch_info(self._env_info_spec, info, "")

    @staticmethod
    def _reward(reward: Any) -> np.ndarray:
        if type(reward) is float:
            return np.asarray(reward, dtype=np.float32)
        value = np.asarray(to_numpy(reward), dtype=np.float32)
        if value.shape != ():
            raise ValueError(f"reward: expected a scalar (reward_spec shape ()), got "
                             f"shape {value.shape}")
        return value

    # ----- stepping -----------------------------------------------------------
    def _env_id_leaf(self) -> np.ndarray:
        """The shared 0-d int32 array of ``env_id`` (made again if it was replaced)."""
        source, array = self._env_id_array
        if source is not self._env_id:
            array = scalar_array(self._env_id, np.int32)
            self._env_id_array = (self._env_id, array)
        return array

    def _gym_reset(self) -> Tuple[Any, Any]:
        """The reset ``reset()`` and the flat reset share: ``(observation, env_info)``."""
        self._current_leaves = None  # reset() sets _current_time_step
        seed, self._pending_seed = self._pending_seed, None
        observation, info = self._gym_env.reset(seed=seed)
        self._choose_gym_action()
        self._info = None  # as ALF's: get_info() is the info of a step
        self._done = False
        return self._observation(observation), self._env_info(info)

    def _reset(self) -> TimeStep:
        observation, env_info = self._gym_reset()
        if self._direct_time_steps and self._fast_zero_action is not None:
            # What restart() builds for a numpy observation (see _compile).
            return TimeStep(FIRST_ARRAY.copy(), np.zeros((), dtype=np.float32),
                            ONE_DISCOUNT_ARRAY.copy(), observation,
                            self._fast_zero_action(), self._env_id_leaf().copy(), (),
                            {} if env_info is None else env_info)
        return restart(observation, self._action_spec, env_id=self._env_id, env_info=env_info)

    def _compile_gym_step(self) -> Callable[[Any], GymStepResult]:
        """Compiles the step of the gymnasium env that ``step()`` and the flat step share.

        A closure, because this class's attributes cost a full lookup each (its
        ``__getattr__`` keeps CPython from specializing them). Its step type, discount and
        env id are shared 0-d arrays; the reward and info are as the env gave them.
        """
        gym_env = self._gym_env
        # This class's _observation, unrolled.
        fast_observation = self._fast_observation if _is_inherited(self, "_observation") else None
        observation_of = self._observation
        general_observation = self._observation_general
        last, mid, zero_discount = LAST_ARRAY, MID_ARRAY, ZERO_DISCOUNT_ARRAY

        def gym_step(action: Any) -> GymStepResult:
            observation, reward, terminated, truncated, info = gym_env.step(
                self._gym_action(action))  # chosen at the last reset
            self._info = info
            self._done = ended = bool(terminated or truncated)
            if fast_observation is None:
                observation = observation_of(observation)
            else:
                try:
                    observation = fast_observation(observation)
                except Exception:  # noqa: BLE001 -- not the common case: the general path decides
                    observation = general_observation(observation)
            if terminated:
                discount = zero_discount
            else:
                source, discount = self._discount_array
                if source is not self._discount:
                    discount = scalar_array(self._discount, np.float32)
                    self._discount_array = (self._discount, discount)
            source, env_id = self._env_id_array
            if source is not self._env_id:
                env_id = self._env_id_leaf()
            return (last if ended else mid, reward, discount, observation, env_id, info,
                    bool(terminated))

        return gym_step

    def _step(self, action: Any) -> TimeStep:
        self._current_leaves = None  # step() sets _current_time_step
        if self._done and self._auto_reset:
            return self.reset()
        action = self._action_arrays(action)
        step_type, reward, discount, observation, env_id, info, terminated = (
            self._gym_step(action))
        reward = self._reward(reward)
        env_info = self._env_info(info)
        if self._direct_time_steps:
            # What termination() / truncation() / transition() build (see _compile).
            return TimeStep(step_type.copy(), reward, discount.copy(), observation, action,
                            env_id.copy(), (), {} if env_info is None else env_info)
        args = (observation, action, reward)
        kwargs = dict(env_id=self._env_id, env_info=env_info)
        if terminated:
            return termination(*args, **kwargs)
        if step_type is LAST_ARRAY:
            return truncation(*args, discount=self._discount, **kwargs)
        return transition(*args, discount=self._discount, **kwargs)
