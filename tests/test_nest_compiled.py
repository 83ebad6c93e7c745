"""compile_nest (alf_env.nest): the same leaves and packed values as
``nest``, for the spec it was compiled for."""

import collections

import numpy as np
import pytest

from alf_env import nest
from alf_env.data_structures import TimeStep
from alf_env.nest import compile_nest
from alf_env.tensor_specs import TensorSpec


def test_compiled_nest_functions_match_nest_and_expose_mismatches():
    spec = TimeStep(step_type=TensorSpec(()), reward=TensorSpec(()), observation={
        "a": TensorSpec((2,)), "b": (TensorSpec(()),)}, env_info={}, untransformed=())
    flatten, pack = compile_nest(spec)
    value = TimeStep(step_type=1, reward=2, observation={"a": 3, "b": (4,)}, env_info={},
                     untransformed=())
    assert flatten(value) == nest.flatten(value)
    assert pack(nest.flatten(value)) == nest.pack_sequence_as(spec, nest.flatten(value))
    # What the spec does not have is kept, so that a codec refuses the leaves.
    assert len(flatten(value._replace(env_info={"extra": 5}))) == len(nest.flatten(value)) + 1
    odd = value._replace(reward={"nested": 1})  # a nest where the spec has a leaf
    assert flatten(odd) == nest.flatten(odd) and len(flatten(odd)) == len(nest.flatten(value))
    assert flatten(("not", "a", "TimeStep")) == ["not", "a", "TimeStep"]
    flatten, pack = compile_nest(TensorSpec((3,)))
    assert flatten("leaf") == ["leaf"] and pack(["leaf"]) == "leaf"


def test_compiled_pack_gives_each_time_step_its_own_empty_fields():
    spec = TimeStep(step_type=TensorSpec(()), observation=TensorSpec((2,)), env_info={},
                    untransformed=(), prev_action=[])
    _, pack = compile_nest(spec)
    leaves = [np.int32(1), np.zeros(2, np.float32)]
    first, second = pack(leaves), pack(leaves)
    expected = nest.pack_sequence_as(spec, leaves)
    for got in (first, second):
        for name in ("env_info", "untransformed", "prev_action"):
            assert type(getattr(got, name)) is type(getattr(expected, name))
            assert getattr(got, name) == getattr(expected, name)
    first.env_info["written"] = 1  # a user's write into one time step's info...
    assert second.env_info == {}  # ...does not show in the next one
    assert first.prev_action is not second.prev_action
    # An empty nest that is not a bare tuple, list or dict is packed by nest.
    deeper = TimeStep(step_type=TensorSpec(()), env_info={"a": ()})
    assert compile_nest(deeper)[1]([np.int32(2)]).env_info == {"a": ()}


@pytest.mark.parametrize("env_info", [
    {"x_position": 0, "x_velocity": 0, "reward_forward": 0, "reward_ctrl": 0},  # MuJoCo's
    {"b": 0, "a": 0},
    {2: 0, "a": 0, 1.5: 0},                   # unorderable keys: sorted by type and str
    collections.OrderedDict(b=0, a=0),        # not a plain dict: nest packs it
    {"outer": {"z": 0, "y": 0}, "a": 0},      # a nested dict: nest packs it
])
def test_compiled_pack_of_dict_fields_gives_what_nest_gives(env_info):
    spec = TimeStep(step_type=TensorSpec(()),
                    env_info=nest.map_structure(lambda _: TensorSpec(()), env_info))
    _, pack = compile_nest(spec)
    leaves = [np.int32(7)] + [np.float32(i) for i in range(len(nest.flatten(env_info)))]
    got, expected = pack(leaves), nest.pack_sequence_as(spec, leaves)
    assert type(got.env_info) is type(expected.env_info)
    assert list(got.env_info.items()) == list(expected.env_info.items())  # order and values
    assert got.env_info is not pack(leaves).env_info  # a dict of its own per time step


@pytest.mark.parametrize("value", [
    {"b": 1, "a": 2, "c": 3},                    # the spec's keys
    collections.OrderedDict(b=1, a=2, c=3),      # another mapping type
    {"b": 1, "a": 2, "z": 3},                    # other keys, as many
    {"b": 1, "a": 2},                            # fewer keys
    {"b": 1, "a": (2, 3), "c": {"d": 4}},        # nests where the spec has leaves
])
def test_compiled_dict_spec_flattens_as_nest_does(value):
    spec = {"b": TensorSpec(()), "a": TensorSpec(()), "c": TensorSpec(())}
    flatten, pack = compile_nest(spec)
    assert flatten(value) == nest.flatten(value)
    leaves = [10, 20, 30]
    got, expected = pack(leaves), nest.pack_sequence_as(spec, leaves)
    assert type(got) is dict and list(got.items()) == list(expected.items())
