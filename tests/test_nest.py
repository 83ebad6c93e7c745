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


@pytest.mark.parametrize("a,b,old_type,new_type", [
    ((1, 2), (1, 2, 3), ValueError, nest.NestStructureError),
    ({"k": 1}, {"j": 1}, ValueError, nest.NestStructureError),
    ((1, [2]), (1, (2, )), TypeError, nest.NestTypeError),
])
@pytest.mark.parametrize("call", ["assert_same_structure", "map_structure",
                                  "map_structure_with_path"])
def test_structure_errors_are_alf_runtime_errors_too(a, b, old_type, new_type, call):
    """ALF's nest raises RuntimeError on a mismatch; the ValueError/TypeError of
    before still catch it as well."""
    functions = {
        "assert_same_structure": lambda: nest.assert_same_structure(a, b),
        "map_structure": lambda: nest.map_structure(lambda x, y: x, a, b),
        "map_structure_with_path": lambda: nest.map_structure_with_path(
            lambda p, x, y: x, a, b),
    }
    for caught in (RuntimeError, old_type, new_type, nest.NestStructureError):
        with pytest.raises(caught, match="expected"):
            functions[call]()


def test_alf_name_py_map_structure_with_path():
    out = nest.py_map_structure_with_path(lambda p, a, b: f"{p}:{a + b}", (1, [2]), (3, [4]))
    assert out == ("0:4", ["1.0:6"])
    with pytest.raises(RuntimeError):
        nest.py_map_structure_with_path(lambda p, a, b: a, [1], (1, ))


def test_pack_sequence_as_count_error_is_runtime_error_too():
    with pytest.raises(RuntimeError, match="3 leaves but the flat sequence has 2"):
        nest.pack_sequence_as((1, 2, 3), [1, 2])


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


# ----- fast paths: node kinds are cached per type --------------------------------

class _PointSub(Point):
    """A namedtuple subclass: still a namedtuple, packed back to its own type."""


class _ReversedPoint(Point):
    """A namedtuple whose iteration differs from tuple's (not the plain fast path)."""

    def __iter__(self):
        return reversed(tuple(tuple.__iter__(self)))


class _TupleSub(tuple):
    """A tuple subclass without _fields: a plain sequence."""


class _ListSub(list):
    """A list subclass: a plain sequence."""


class _ShortFields(tuple):
    """A tuple subclass whose _fields is shorter than the tuple itself."""

    _fields = ("only", )


class _Proxy:
    """Reports a per-instance ``__class__``, as proxies and mocks do."""

    def __init__(self, claimed, items):
        self._claimed = claimed
        self._items = list(items)

    @property
    def __class__(self):
        return self._claimed

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)


@pytest.mark.parametrize("structure,flat", [
    (_PointSub(1, (2, 3)), [1, 2, 3]),
    (_TupleSub((3, [4])), [3, 4]),
    (_ListSub([5, (6, )]), [5, 6]),
    (collections.OrderedDict([("b", 1), ("a", (2, ))]), [2, 1]),
    (collections.defaultdict(int, {"y": 1, "x": 2}), [2, 1]),
    ({1: "a", "b": 2}, ["a", 2]),  # unorderable keys: sorted by type name, then str
    ([(), {}, [], ()], []),
])
def test_flatten_and_pack_of_container_variants(structure, flat):
    assert nest.flatten(structure) == flat
    assert [leaf for _, leaf in nest.flatten_with_path(structure)] == flat
    packed = nest.pack_sequence_as(structure, flat)
    assert type(packed) is type(structure)
    nest.assert_same_structure(structure, packed)
    assert nest.flatten(packed) == flat


def test_namedtuple_children_follow_zip_of_fields_and_iteration():
    # The children of a namedtuple are zip(_fields, iter(value)).
    reversed_point = _ReversedPoint(1, 2)
    assert nest.flatten(reversed_point) == [2, 1]
    assert nest.pack_sequence_as(reversed_point, [2, 1]) == _ReversedPoint(2, 1)
    assert [p for p, _ in nest.flatten_with_path(reversed_point)] == ["x", "y"]
    short = tuple.__new__(_ShortFields, (7, 8))
    assert nest.flatten(short) == [7]
    assert nest.flatten_with_path(short) == [("only", 7)]
    long_tuple = tuple.__new__(Point, (1, 2, 3))  # fields shorter than the tuple
    assert nest.flatten(long_tuple) == [1, 2]
    assert nest.pack_sequence_as(long_tuple, [4, 5]) == Point(4, 5)
    short_tuple = tuple.__new__(Point, (1, ))  # fields longer than the tuple
    assert nest.flatten(short_tuple) == [1]
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        nest.pack_sequence_as(short_tuple, [1])


def test_pack_keeps_namedtuple_subclass_and_list_vs_tuple():
    packed = nest.pack_sequence_as([_PointSub(0, 0), (0, )], [1, 2, 3])
    assert type(packed) is list and type(packed[0]) is _PointSub
    assert type(packed[1]) is tuple and packed == [_PointSub(1, 2), (3, )]
    assert nest.pack_sequence_as({"b": {}, "a": ()}, []) == {"b": {}, "a": ()}


def test_pack_of_empty_dicts_makes_new_dicts():
    structure = ({}, [])
    packed = nest.pack_sequence_as(structure, [])
    assert packed == ({}, [])
    assert packed[0] is not structure[0] and packed[1] is not structure[1]


def test_pack_sequence_as_accepts_any_iterable_and_does_not_change_lists():
    flat = [1, 2]
    assert nest.pack_sequence_as((0, [0]), iter(flat)) == (1, [2])
    assert nest.pack_sequence_as((0, [0]), (x for x in flat)) == (1, [2])
    assert flat == [1, 2]


@pytest.mark.parametrize("flat", [[1], [1, 2, 3, 4]])
def test_pack_sequence_as_count_error_comes_before_constructor_errors(flat):

    class Strict(collections.namedtuple("Strict", "a b")):
        def __new__(cls, a, b):
            if a is None or b is None:
                raise TypeError("Strict needs two values")
            return super().__new__(cls, a, b)

    with pytest.raises(ValueError, match=f"has 3 leaves but the flat sequence has {len(flat)}"):
        nest.pack_sequence_as((Strict(0, 0), 0), flat)
    with pytest.raises(TypeError, match="Strict needs two values"):
        nest.pack_sequence_as(Strict(0, 0), [None, 1])


def test_mapping_registered_later_becomes_a_container():
    # A class made per call: the registration below must not leak to reruns.
    class MappingLike:
        """Mapping protocol without being a Mapping (until registered)."""

        def __init__(self, items):
            self._items = dict(items)

        def __getitem__(self, key):
            return self._items[key]

        def __iter__(self):
            return iter(self._items)

        def __len__(self):
            return len(self._items)

        def __eq__(self, other):
            return type(other) is type(self) and other._items == self._items

    value = MappingLike({"b": 2, "a": 1})
    assert not nest.is_nested(value)
    assert nest.flatten(value) == [value]
    collections.abc.Mapping.register(MappingLike)
    assert nest.is_nested(value)
    assert nest.flatten(value) == [1, 2]
    assert nest.pack_sequence_as(value, [10, 20]) == MappingLike({"b": 20, "a": 10})


def test_kind_cache_stays_bounded_with_classes_made_on_the_fly():
    for i in range(nest._MAX_CACHED_KINDS + 10):
        leaf_type = type(f"Leaf{i}", (), {})
        assert nest.flatten((leaf_type(), )) != []
    assert len(nest.KINDS) <= nest._MAX_CACHED_KINDS


def test_per_instance_class_is_not_cached():
    as_tuple = _Proxy(tuple, [1, 2])
    as_leaf = _Proxy(int, [3, 4])
    assert nest.is_nested(as_tuple) and nest.flatten(as_tuple) == [1, 2]
    assert not nest.is_nested(as_leaf) and nest.flatten(as_leaf) == [as_leaf]
    assert nest.is_nested(as_tuple)


@pytest.mark.parametrize("a,b,error,message", [
    ({"x": [1, (2, Point(3, {"k": 4}))]}, {"x": [1, (2, Point(3, {"j": 4}))]}, ValueError,
     r"path 'x\.1\.1\.y': expected keys \['k'\], got keys \['j'\] \(missing \['k'\], "
     r"unexpected \['j'\]\)\."),
    (Point(1, (2, 3)), Point(1, (2, )), ValueError,
     r"path 'y': expected tuple of length 2, got tuple of length 1\."),
    ([(), [()]], [(), [[]]], TypeError, r"path '1\.0': expected tuple of length 0, got list"),
    ([{}, {}], [{}, ()], TypeError, r"path '1': expected dict with keys \[\], got tuple"),
    (_PointSub(1, 2), Point(1, 2), TypeError, r"root: expected _PointSub of length 2, got Point"),
])
def test_assert_same_structure_deep_paths(a, b, error, message):
    with pytest.raises(error, match=message) as info:
        nest.assert_same_structure(a, b)
    # Raised directly: no internal exception attached.
    assert info.value.__context__ is None and info.value.__cause__ is None


def test_assert_same_structure_empty_containers_and_check_types():
    nest.assert_same_structure(((), {}, []), ((), {}, []))
    nest.assert_same_structure(((), {}), ([], collections.OrderedDict()), check_types=False)
    with pytest.raises(TypeError, match="path '0': expected tuple of length 0, got list"):
        nest.assert_same_structure(((), ), ([], ))


def test_map_structure_keeps_types_of_first_nest():
    a = collections.OrderedDict([("z", _PointSub(1, 2)), ("a", [3])])
    b = {"a": [30], "z": _PointSub(10, 20)}
    out = nest.map_structure(lambda x, y: x + y, a, b)
    assert type(out) is collections.OrderedDict and list(out) == ["z", "a"]
    assert type(out["z"]) is _PointSub and out["z"] == _PointSub(11, 22)
    assert out["a"] == [33]
