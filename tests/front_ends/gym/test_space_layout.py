"""alf_env.front_ends.gym.space_layout: gymnasium spaces <-> shared-memory fields, no processes."""

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import concatenate, create_empty_array

from alf_env.front_ends.gym.space_layout import SpaceLayout
from tests.support.gym_envs import assert_tree_equal

NUM_ROWS = 4

FIXED_SPACES = {
    "box": spaces.Box(-1.0, 1.0, (2, 3), np.float32),
    "box_scalar": spaces.Box(0, 255, (), np.uint8),
    "discrete": spaces.Discrete(5, start=-2),
    "multi_discrete": spaces.MultiDiscrete([[2, 3], [4, 5]]),
    "multi_binary": spaces.MultiBinary((2, 2)),
    "text": spaces.Text(6, min_length=0, charset="abcé€𝄞"),
    "tuple": spaces.Tuple((spaces.Discrete(3), spaces.Box(0, 1, (2,), np.float64))),
    "dict": spaces.Dict({"b": spaces.Discrete(2), "a": spaces.Box(0, 1, (1,))},
                        sort_keys=False),
    "one_of": spaces.OneOf((spaces.Discrete(4), spaces.Box(-1, 1, (2,), np.float32),
                            spaces.Text(3))),
    "nested": spaces.Dict({"t": spaces.Tuple((spaces.Text(2), spaces.MultiBinary(3))),
                           "o": spaces.OneOf((spaces.Discrete(2), spaces.MultiDiscrete([4])))}),
}

PIPE_SPACES = {
    "graph": spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3)),
    "sequence": spaces.Sequence(spaces.Discrete(4)),
    "stacked_sequence": spaces.Sequence(spaces.Box(0, 1, (2,)), stack=True),
    "one_of_with_graph": spaces.OneOf((spaces.Discrete(2),
                                       spaces.Graph(spaces.Box(0, 1, (1,)), None))),
}


def views_of(layout: SpaceLayout, num_rows: int = NUM_ROWS):
    """Plain arrays with the shapes of a block's field views."""
    return [np.zeros((num_rows, *shape), dtype) for _, shape, dtype in layout.fields]


def samples(space, n=NUM_ROWS, seed=0):
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def gym_batch(space, items):
    """What gymnasium's SyncVectorEnv returns for these per-env values."""
    return concatenate(space, items, create_empty_array(space, len(items), fn=np.zeros))


# gymnasium warns when it casts the scalar Box's sample to an array.
@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array")
@pytest.mark.parametrize("name", sorted(FIXED_SPACES))
def test_fixed_space_round_trip_matches_gymnasium_batching(name):
    space = FIXED_SPACES[name]
    layout = SpaceLayout(space, "obs", "observation")
    assert layout.num_pipe_leaves == 0
    views = views_of(layout)
    items = samples(space)
    for row, item in enumerate(items):
        assert layout.write_row(views, row, item) == []
    for row, item in enumerate(items):
        back = layout.read_row(views, row)
        assert space.contains(back), (back, space)
        assert_tree_equal(gym_batch(space, [back]), gym_batch(space, [item]))
    rows = list(range(NUM_ROWS))
    assert_tree_equal(layout.read_rows(views, slice(0, NUM_ROWS), rows),
                      gym_batch(space, items))
    picked = [2, 0]
    assert_tree_equal(layout.read_rows(views, np.asarray(picked), picked),
                      gym_batch(space, [items[i] for i in picked]))


@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array")
@pytest.mark.parametrize("name", sorted(FIXED_SPACES))
@pytest.mark.parametrize("copy", [True, False])
def test_the_batch_reader_reads_what_read_rows_reads(name, copy):
    space = FIXED_SPACES[name]
    layout = SpaceLayout(space, "obs", "observation")
    views = views_of(layout)
    rows = slice(0, NUM_ROWS)
    read_all = layout.batch_reader(views, rows, copy)
    if len(layout.fields) != 1:  # several fields: only read_rows reads them
        assert read_all is None
        return
    assert read_all is not None
    for seed in (0, 1):  # the reader follows what the rows hold now
        for row, item in enumerate(samples(space, seed=seed)):
            layout.write_row(views, row, item)
        got, want = read_all(), layout.read_rows(views, rows, list(range(NUM_ROWS)), copy=copy)
        assert_tree_equal(got, want)
        assert type(got) is type(want) and got.dtype == want.dtype
        # A copy owns its values; without copy, a view of the rows.
        assert np.shares_memory(got, views[0]) is not copy


@pytest.mark.parametrize("name", sorted(FIXED_SPACES))
def test_batches_written_by_the_parent_read_back_per_row(name):
    # The action direction: a batched value in, one value per env row out.
    space = FIXED_SPACES[name]
    layout = SpaceLayout(space, "act", "action")
    views = views_of(layout)
    items = samples(space, seed=1)
    batched = gym_batch(space, items)
    arrays = layout.encode_batch(batched, NUM_ROWS)
    assert [a.shape[0] for a in arrays] == [NUM_ROWS] * len(arrays)
    layout.write_rows(views, slice(0, NUM_ROWS), arrays)
    for row, item in enumerate(items):
        assert_tree_equal(gym_batch(space, [layout.read_row(views, row)]),
                          gym_batch(space, [item]))


def test_read_row_gives_what_gymnasium_iterate_gives():
    layout = SpaceLayout(spaces.Tuple((spaces.Discrete(3), spaces.Box(0, 1, (2,)))),
                         "act", "action")
    views = views_of(layout)
    layout.write_rows(views, slice(0, 2), layout.encode_batch(
        (np.array([2, 1]), np.ones((2, 2), np.float32)), 2))
    discrete, box = layout.read_row(views, 0)
    assert type(discrete) is np.int64 and discrete == 2
    assert box.dtype == np.float32 and box.flags.owndata  # a copy, not a view
    box[:] = 5
    assert views[1][0, 0] == 1


@pytest.mark.parametrize("name", sorted(PIPE_SPACES))
def test_spaces_without_fixed_size_are_pipe_leaves(name):
    space = PIPE_SPACES[name]
    layout = SpaceLayout(space, "obs", "observation")
    assert layout.pipe_paths == ("observation",)
    assert layout.fields == ()
    items = samples(space)
    leaves = [layout.write_row([], row, item) for row, item in enumerate(items)]
    assert all(len(leaf) == 1 for leaf in leaves)
    rows = list(range(NUM_ROWS))
    assert_tree_equal(layout.read_rows([], slice(0, NUM_ROWS), rows, leaves),
                      gym_batch(space, items))
    assert_tree_equal(layout.read_row([], 1, leaves[1]), items[1])


def test_mixed_space_puts_only_the_unsized_parts_on_the_pipe():
    space = spaces.Dict({"img": spaces.Box(0, 255, (2, 2), np.uint8),
                         "seq": spaces.Sequence(spaces.Discrete(3)),
                         "t": spaces.Tuple((spaces.Graph(spaces.Box(0, 1, (1,)), None),
                                            spaces.Discrete(2)))})
    layout = SpaceLayout(space, "obs", "observation")
    assert layout.pipe_paths == ("observation['seq']", "observation['t'][0]")
    assert [shape for _, shape, _ in layout.fields] == [(2, 2), ()]
    views = views_of(layout)
    items = samples(space)
    leaves = [layout.write_row(views, row, item) for row, item in enumerate(items)]
    assert all(len(leaf) == 2 for leaf in leaves)
    assert_tree_equal(layout.read_rows(views, slice(0, NUM_ROWS), list(range(NUM_ROWS)),
                                       leaves), gym_batch(space, items))


def test_field_names_are_positional_and_unique():
    space = spaces.Dict({"a.b": spaces.Discrete(2),
                         "a": spaces.Dict({"b": spaces.Discrete(2)}),
                         "t": spaces.Text(3)})
    layout = SpaceLayout(space, "obs", "observation")
    assert layout.field_names == ("obs.0", "obs.1", "obs.2", "obs.3")
    assert len(set(layout.field_names)) == len(layout.fields)


def test_text_keeps_every_code_point_and_trailing_nul():
    space = spaces.Text(5, charset="a\x00€𝄞")
    layout = SpaceLayout(space, "obs", "observation")
    views = views_of(layout)
    for row, text in enumerate(["", "a\x00", "𝄞€a\x00\x00"]):
        layout.write_row(views, row, text)
        assert layout.read_row(views, row) == text


@pytest.mark.parametrize("space, value, message", [
    (spaces.Box(0, 1, (2,), np.float32), np.zeros(3, np.float32),
     r"observation: expected shape \(2,\) and dtype float32, got shape \(3,\)"),
    (spaces.Box(0, 1, (2,), np.int8), np.zeros(2, np.float32),
     r"observation: .*dtype int8, got shape \(2,\) and dtype float32"),
    (spaces.Dict({"x": spaces.Discrete(2)}), {"y": 1},
     r"observation: expected a dict with keys \['x'\], missing \['x'\]"),
    (spaces.Tuple((spaces.Discrete(2),)), (1, 2),
     r"observation: expected a tuple of 1 values, got a tuple of length 2"),
    (spaces.Text(2), "abc", r"observation: expected a str of at most 2 characters, got 3"),
    (spaces.OneOf((spaces.Discrete(2),)), (1, 0),
     r"observation: expected an index in \[0, 1\), got 1"),
    (spaces.Dict({"p": spaces.Box(0, 1, (2,))}), {"p": np.zeros(1)},
     r"observation\['p'\]: expected shape \(2,\)"),
])
def test_values_that_do_not_fit_raise_naming_the_path(space, value, message):
    layout = SpaceLayout(space, "obs", "observation")
    views = views_of(layout)
    before = [v.copy() for v in views]
    with pytest.raises(ValueError, match=message):
        layout.write_row(views, 0, value)
    for view, old in zip(views, before):
        np.testing.assert_array_equal(view, old)  # nothing written


@pytest.mark.parametrize("value, message", [
    (np.zeros((1,), np.float32), r"observation: expected shape \(2,\)"),     # would broadcast
    (np.zeros((1, 2), np.float32), r"observation: expected shape \(2,\)"),
    (np.zeros(2, np.complex64), r"observation: .*dtype complex64"),
])
def test_one_array_space_checks_exact_dtype_arrays_of_the_wrong_shape(value, message):
    # The one-array fast path takes only arrays of the exact dtype and shape.
    layout = SpaceLayout(spaces.Box(0, 1, (2,), np.float32), "obs", "observation")
    views = views_of(layout)
    with pytest.raises(ValueError, match=message):
        layout.write_row(views, 1, value)
    assert not views[0].any()


def test_one_array_space_rows_round_trip_as_copies():
    layout = SpaceLayout(spaces.Box(0, 1, (2,), np.float32), "obs", "observation")
    views = views_of(layout)
    strided = np.arange(4, dtype=np.float32)[::2]  # exact dtype, not contiguous
    assert layout.write_row(views, 2, strided) == []
    value = layout.read_row(views, 2)
    np.testing.assert_array_equal(value, [0.0, 2.0])
    value[0] = 7.0
    assert views[0][2, 0] == 0.0  # a copy, not a view of the row
    discrete = SpaceLayout(spaces.Discrete(3), "act", "action")
    dviews = views_of(discrete)
    discrete.write_row(dviews, 0, np.int64(2))
    assert discrete.read_row(dviews, 0) == 2


def test_one_row_uses_same_kind_casting():
    # Like np.stack(out=...) in gymnasium: an env's float64 fits a float32 Box.
    layout = SpaceLayout(spaces.Box(0, 1, (2,), np.float32), "obs", "observation")
    views = views_of(layout)
    layout.write_row(views, 0, np.array([0.5, 0.25]))
    np.testing.assert_array_equal(views[0][0], [0.5, 0.25])


@pytest.mark.parametrize("space, batch, message", [
    (spaces.Discrete(3), np.array([0.0, 1.0]),
     r"action: expected shape \(2,\) \(a batch of 2 x space shape \(\)\) and dtype int64, "
     r"got shape \(2,\) and dtype float64 \(float64 does not cast to int64 under numpy's "
     r"'safe' rule"),
    (spaces.Box(-1, 1, (3,), np.float32), np.zeros((2, 4), np.float32),
     r"action: expected shape \(2, 3\) .* got shape \(2, 4\)"),
    (spaces.Box(-1, 1, (3,), np.float32), np.zeros((3, 3), np.float32),
     r"action: expected shape \(2, 3\) \(a batch of 2"),
    (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))), np.zeros(2, np.int64),
     r"action: expected a tuple of 2 batched values"),
    (spaces.Dict({"k": spaces.Discrete(2)}), {"j": np.zeros(2, np.int64)},
     r"action: expected a dict with keys \['k'\]"),
    (spaces.Text(2), ("ab",), r"action: expected a tuple of 2 str"),
])
def test_bad_batches_raise_naming_field_and_expectation(space, batch, message):
    layout = SpaceLayout(space, "act", "action")
    with pytest.raises(ValueError, match=message):
        layout.encode_batch(batch, 2)


def test_safe_casts_are_accepted_for_batches():
    layout = SpaceLayout(spaces.Discrete(3), "act", "action")
    arrays = layout.encode_batch(np.array([1, 2], np.int32), 2)
    views = views_of(layout, 2)
    layout.write_rows(views, slice(0, 2), arrays)
    assert views[0].dtype == np.int64 and views[0].tolist() == [1, 2]
    assert layout.encode_batch([0, 2], 2)[0].tolist() == [0, 2]


def test_layouts_pickle():
    import pickle
    layout = SpaceLayout(FIXED_SPACES["nested"], "obs", "observation")
    again = pickle.loads(pickle.dumps(layout))
    assert again.fields == layout.fields
    views = views_of(again)
    item = samples(FIXED_SPACES["nested"], 1)[0]
    again.write_row(views, 0, item)
    assert_tree_equal(gym_batch(again.space, [again.read_row(views, 0)]),
                      gym_batch(again.space, [item]))
