"""The job handler of FastParallelEnvironment's workers (alf_env.front_ends.alf.alf_rows),
run in this process over a shared block: what it writes into the rows is what
the envs' ``step()`` returns, value for value, whether a member takes the flat
step (a plain ``AlfGymWrapper``) or builds its ``TimeStep`` (any other env)."""

import functools

import numpy as np
import pytest

from alf_env import nest
from alf_env.control_plane.step_timings import StepClock
from alf_env.data_plane.shared_block import SharedBlock
from alf_env.environments.alf_gym_wrapper import AlfGymWrapper
from alf_env.front_ends.alf import alf_rows
from alf_env.front_ends.alf.alf_rows import AlfRowsHandler
from alf_env.front_ends.alf.env_batch import AlfEnvBatch
from tests.support.gym_envs import FaultyEnv, NumericInfoEnv
from tests.support.timings import check_clock_counts


class _Subclass(AlfGymWrapper):
    """Converts as its base class, but is a subclass: no flat step."""


def _numeric(env_id, cls=AlfGymWrapper):
    env = NumericInfoEnv("come_go", episode_length=4)
    env.reset(seed=env_id)  # the probe's reset is unseeded: seed it the same in both runs
    return cls(env, env_id=env_id, discount=0.9)


def _handler(env, num_rows):
    """An AlfRowsHandler bound to ``env`` over a block of its specs; (handler, views)."""
    fields, names = [], {"action": [], "time_step": []}
    for prefix, spec in (("action", env.action_spec()), ("time_step", env.time_step_spec())):
        for path, leaf in nest.flatten_with_path(spec):
            fields.append((f"{prefix}.{path}", tuple(leaf.shape), leaf.numpy_dtype))
            names[prefix].append(f"{prefix}.{path}")
    block = SharedBlock(fields, num_rows=num_rows, num_workers=1)
    handler = AlfRowsHandler((0, num_rows), tuple(names["action"]), tuple(names["time_step"]),
                             grouped=isinstance(env, AlfEnvBatch))(env, block, None, 0)
    views = ([block.views[n] for n in names["action"]],
             [block.views[n] for n in names["time_step"]])
    return handler, views, block


def _rows(views, batched):
    return [np.array(v if batched else v[0]) for v in views]


def _expected(time_step):
    return [np.asarray(x) for x in nest.flatten(time_step)]


def _assert_leaves_equal(got, expected, step):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, step
        np.testing.assert_array_equal(g, e, err_msg=f"step {step}")


def _drive(handler, twin, action_views, out_views, batch, num_steps):
    """Resets and steps ``handler`` and its ``twin`` (stepped through ``step()``)
    with the same random actions, comparing the rows after each; returns the
    number of episode ends. ``batch``: the twin's batch size (``None``: an
    unbatched env, whose rows have one row)."""
    handler.reset(0)
    batched = batch is not None
    _assert_leaves_equal(_rows(out_views, batched), _expected(twin.reset()), "reset")
    rng = np.random.RandomState(0)
    ends = 0
    for step in range(num_steps):
        action = rng.uniform(-1, 1, (batch or 1, 2)).astype(np.float32)
        action_views[0][...] = action
        handler.step(0)
        expected = twin.step(action if batched else action[0])
        _assert_leaves_equal(_rows(out_views, batched), _expected(expected), step)
        ends += int(expected.is_last().sum())
        handler.after_step()  # the worker loop runs it once the job is reported
        if isinstance(twin, AlfEnvBatch):
            twin.reset_ended()  # what a group's after_step does too
    return ends


@pytest.mark.parametrize("member_classes", [
    (AlfGymWrapper,) * 3,                      # every member takes the flat step
    (AlfGymWrapper, _Subclass, AlfGymWrapper),  # and mixed with one that does not
])
def test_group_rows_hold_what_the_members_step_returns(member_classes, monkeypatch):
    ctors = [functools.partial(_numeric, cls=cls) for cls in member_classes]
    group, twin = AlfEnvBatch(ctors, 10), AlfEnvBatch(ctors, 10)
    handler, (action_views, out_views), block = _handler(group, 3)
    built = []  # members that built a TimeStep in a step (not a reset)
    original_step = AlfGymWrapper._step

    def counting_step(self, action):
        built.append(self)
        return original_step(self, action)

    monkeypatch.setattr(AlfGymWrapper, "_step", counting_step)
    try:
        for env in (group, twin):
            env.seed(3)
        assert _drive(handler, twin, action_views, out_views, 3, 30) >= 6
        # In the handler's group only a subclass builds its TimeSteps (an
        # ended plain member was reset after its LAST step, by reset_ended).
        members = [id(m) for m in group.members]
        builders = {type(env) for env in built if id(env) in members}
        assert builders == ({_Subclass} if _Subclass in member_classes else set())
        assert len(built) > 30  # the twin's members build theirs
    finally:
        group.close()
        twin.close()
        block.close()


def test_a_single_env_takes_the_flat_step_and_step_for_its_resets():
    env, twin = _numeric(4), _numeric(4)
    handler, (action_views, out_views), block = _handler(env, 1)
    try:
        for e in (env, twin):
            e.seed(5)
        # The step after LAST is a reset: step() does it.
        assert _drive(handler, twin, action_views, out_views, None, 25) >= 3
        _assert_leaves_equal(_expected(env.current_time_step()),
                             _expected(twin.current_time_step()), "current")
    finally:
        env.close()
        twin.close()
        block.close()


def test_a_flat_step_that_raises_names_its_env():
    ctors = [functools.partial(lambda env_id: AlfGymWrapper(
        FaultyEnv("raise" if env_id == 11 else "", at_step=4), env_id=env_id))] * 2
    group = AlfEnvBatch(ctors, 10)
    handler, (action_views, _), block = _handler(group, 2)
    try:
        handler.reset(0)
        handler.step(0)  # the probe stepped each env once: this is step 2, then 3
        handler.step(0)
        with pytest.raises(ValueError, match="injected failure") as info:
            handler.step(0)
        assert "raised by env 11 during step" in "".join(info.value.__notes__)
    finally:
        group.close()
        block.close()


@pytest.mark.parametrize("member_classes", [(AlfGymWrapper,) * 3,
                                            (AlfGymWrapper, _Subclass, AlfGymWrapper)])
def test_every_member_steps_before_any_row_is_written(member_classes, monkeypatch):
    group = AlfEnvBatch([functools.partial(_numeric, cls=cls) for cls in member_classes], 10)
    handler, (action_views, _), block = _handler(group, 3)
    order = []
    step_member, step_member_flat = group.step_member, group.step_member_flat

    def logged_step(j, *args):
        order.append(("step", j))
        return step_member(j, *args)

    def logged_flat_step(j, *args):
        order.append(("step", j))
        return step_member_flat(j, *args)

    monkeypatch.setattr(group, "step_member", logged_step)
    monkeypatch.setattr(group, "step_member_flat", logged_flat_step)
    # Every write of a member's rows is one native copy into its views (the
    # checking path copies what that one did not).
    member_of = {id(outputs.views): j for j, (_, outputs, _) in enumerate(handler._members)}
    copy_leaves = alf_rows.copy_leaves

    def logged_copy_leaves(views, leaves, scalars=False):
        order.append(("write", member_of[id(views)]))
        return copy_leaves(views, leaves, scalars)

    monkeypatch.setattr(alf_rows, "copy_leaves", logged_copy_leaves)
    try:
        handler.reset(0)
        action_views[0][...] = 0.5
        order.clear()
        handler.step(0)
        steps = [entry for entry in order if entry[0] == "step"]
        writes = [entry for entry in order if entry[0] == "write"]
        assert sorted({j for _, j in steps}) == [0, 1, 2]
        assert writes == [("write", j) for j in range(3)]
        assert order.index(writes[0]) > max(order.index(s) for s in steps)
    finally:
        group.close()
        block.close()


@pytest.mark.parametrize("member_classes", [
    None,                                       # a single env, flat step
    (_Subclass,),                               # a single env, step()
    (AlfGymWrapper, _Subclass, AlfGymWrapper),  # a group, flat and not
])
def test_every_step_of_every_env_is_timed_into_the_workers_clock(member_classes):
    if member_classes is None:
        env = _numeric(4)
    elif len(member_classes) == 1:
        env = _numeric(4, member_classes[0])
    else:
        env = AlfEnvBatch([functools.partial(_numeric, cls=cls) for cls in member_classes], 10)
    num_envs = 1 if member_classes is None else len(member_classes)
    fields, names = [], {"action": [], "time_step": []}
    for prefix, spec in (("action", env.action_spec()), ("time_step", env.time_step_spec())):
        for path, leaf in nest.flatten_with_path(spec):
            fields.append((f"{prefix}.{path}", tuple(leaf.shape), leaf.numpy_dtype))
            names[prefix].append(f"{prefix}.{path}")
    block = SharedBlock(fields, num_rows=num_envs, num_workers=1)
    clock = StepClock()
    handler = AlfRowsHandler((0, num_envs), tuple(names["action"]), tuple(names["time_step"]),
                             grouped=isinstance(env, AlfEnvBatch))(env, block, None, 0, clock)
    try:
        handler.reset(0)
        for _ in range(12):  # past episode ends: the step after LAST is timed too
            handler.step(0)
            handler.after_step()  # as the job loop does once the step is reported
        check_clock_counts(clock, 12, num_envs)
    finally:
        env.close()
        block.close()
