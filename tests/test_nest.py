"""Tests of alf_env.nest."""

import collections

import numpy as np
import pytest
import torch

from alf_env import nest

Point = collections.namedtuple("Point", ["x", "y"])
Other = collections.namedtuple("Other", ["x", "y"])


def _sample_nest():
    return {
        "obs": (np.zeros(2), [torch.ones(1), "text"]),
        "info": {"speed": 1.5, "alive": None},
        "pt": Point(x=3, y=np.int32(4)),
        "empty": (),
    }


@pytest.mark.parametrize("structure,expected_flat", [
    ((1, 2, 3), [1, 2, 3]),
    ([1, [2, 3]], [1, 2, 3]),
    (Point(x=1, y=2), [1, 2]),
    ({"b": 2, "a": 1, "c": 3}, [1, 2, 3]),
    (collections.OrderedDict([("z", 1), ("a", 2)]), [2, 1]),
    ((), []),
    ({}, []),
    (5, [5]),
    (None, [None]),
    ("abc", ["abc"]),
])
def test_flatten_orders_leaves(structure, expected_flat):
    assert nest.flatten(structure) == expected_flat


@pytest.mark.parametrize("structure", [
    (1, (2, 3)),
    [1, [2, (3, )]],
    Point(x=1, y=(2, 3)),
    {"b": 1, "a": [2, 3]},
    collections.OrderedDict([("z", 1), ("a", Point(2, 3))]),
    collections.defaultdict(list, {"k": 1, "j": 2}),
    ((), {}, []),
    7,
])
def test_pack_sequence_as_round_trips(structure):
    flat = nest.flatten(structure)
    packed = nest.pack_sequence_as(structure, flat)
    assert packed == structure
    assert type(packed) is type(structure)
    nest.assert_same_structure(structure, packed)


def test_pack_keeps_namedtuple_type_and_sorts_dict_keys():
    structure = {"b": Point(0, 0), "a": 0}
    packed = nest.pack_sequence_as(structure, [10, 20, 30])
    assert packed["a"] == 10
    assert isinstance(packed["b"], Point)
    assert packed["b"] == Point(20, 30)


def test_pack_keeps_ordered_dict_type_and_key_order():
    structure = collections.OrderedDict([("z", 0), ("a", 0)])
    # Flat order is sorted by key: "a" gets 1, "z" gets 2.
    packed = nest.pack_sequence_as(structure, [1, 2])
    assert type(packed) is collections.OrderedDict
    assert list(packed.items()) == [("z", 2), ("a", 1)]


def test_pack_sequence_as_rejects_wrong_length():
    with pytest.raises(ValueError, match="3 leaves but the flat sequence has 2"):
        nest.pack_sequence_as((1, (2, 3)), [1, 2])


def test_map_structure_multiple_nests():
    a = {"x": (1, 2), "y": 3}
    b = {"x": (10, 20), "y": 30}
    assert nest.map_structure(lambda u, v: u + v, a, b) == {"x": (11, 22), "y": 33}


def test_map_structure_keeps_leaves_like_tensors_and_strings():
    result = nest.map_structure(lambda x: type(x).__name__, _sample_nest())
    assert result["obs"] == ("ndarray", ["Tensor", "str"])
    assert result["info"] == {"speed": "float", "alive": "NoneType"}
    assert result["pt"] == Point("int", "int32")
    assert result["empty"] == ()


def test_map_structure_with_path_gives_dotted_paths():
    paths = nest.map_structure_with_path(lambda path, _: path, _sample_nest())
    assert paths["obs"] == ("obs.0", ["obs.1.0", "obs.1.1"])
    assert paths["info"] == {"speed": "info.speed", "alive": "info.alive"}
    assert paths["pt"] == Point("pt.x", "pt.y")


def test_map_structure_with_path_root_leaf_has_empty_path():
    assert nest.map_structure_with_path(lambda path, x: (path, x), 4) == ("", 4)


def test_map_structure_with_path_passes_all_leaves():
    out = nest.map_structure_with_path(lambda p, a, b: f"{p}:{a + b}", (1, [2]), (3, [4]))
    assert out == ("0:4", ["1.0:6"])


def test_flatten_with_path_matches_flatten_order():
    sample = _sample_nest()
    paths_and_leaves = nest.flatten_with_path(sample)
    assert [leaf for _, leaf in paths_and_leaves] == nest.flatten(sample)
    assert [p for p, _ in paths_and_leaves][:2] == ["info.alive", "info.speed"]


@pytest.mark.parametrize("a,b,error,message", [
    ((1, 2), (1, 2, 3), ValueError, r"root: expected tuple of length 2, got tuple of length 3"),
    ({"obs": (1, 2)}, {"obs": (1, [2])}, ValueError,
     r"path 'obs.1': expected leaf of type int, got list of length 1"),
    ({"info": {"speed": 1}}, {"info": {"sped": 1}}, ValueError,
     r"path 'info': expected keys \['speed'\], got keys \['sped'\]"),
    ((1, [2]), (1, (2, )), TypeError, r"path '1': expected list of length 1, got tuple"),
    (Point(1, 2), Other(1, 2), TypeError, r"root: expected Point of length 2, got Other"),
    ({"a": 1}, (1, ), TypeError, r"root: expected dict with keys \['a'\], got tuple"),
    ((), {}, TypeError, r"expected tuple of length 0, got dict"),
])
def test_assert_same_structure_names_path(a, b, error, message):
    with pytest.raises(error, match=message):
        nest.assert_same_structure(a, b)


def test_assert_same_structure_accepts_any_mappings_and_ignores_leaves():
    nest.assert_same_structure({"a": 1, "b": (2, )},
                               collections.OrderedDict([("b", ("x", )), ("a", None)]))


def test_assert_same_structure_without_type_check():
    nest.assert_same_structure((1, [2]), [1, (2, )], check_types=False)


def test_map_structure_check_types_false_accepts_list_for_tuple():
    assert nest.map_structure(lambda a, b: a + b, (1, 2), [3, 4], check_types=False) == (4, 6)
    out = nest.map_structure_with_path(lambda p, a, b: p, (1, ), [2], check_types=False)
    assert out == ("0", )
    with pytest.raises(TypeError, match="expected tuple of length 2, got list"):
        nest.map_structure(lambda a, b: a, (1, 2), [3, 4])


def test_map_structure_raises_on_mismatch():
    with pytest.raises(ValueError, match=r"path 'x'"):
        nest.map_structure(lambda a, b: a, {"x": (1, )}, {"x": 1})


def test_map_structure_needs_a_nest():
    with pytest.raises(ValueError, match="at least one nest"):
        nest.map_structure(lambda: 0)


def test_is_nested_and_is_namedtuple():
    assert nest.is_nested(()) and nest.is_nested([]) and nest.is_nested({})
    assert not nest.is_nested(np.zeros(3)) and not nest.is_nested("ab")
    assert nest.is_namedtuple(Point(1, 2)) and not nest.is_namedtuple((1, 2))


def test_stack_numpy_and_torch():
    stacked = nest.stack([{"a": np.zeros(2), "b": torch.ones(1)},
                          {"a": np.ones(2), "b": torch.zeros(1)}])
    assert isinstance(stacked["a"], np.ndarray) and stacked["a"].shape == (2, 2)
    assert torch.is_tensor(stacked["b"]) and stacked["b"].shape == (2, 1)
    with pytest.raises(ValueError, match="empty sequence"):
        nest.stack([])
