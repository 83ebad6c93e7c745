"""action_items: each env's action item through the rows, rebuilt exactly, batch after batch.

The vector-env contract (tests/front_ends/gym/test_async_contract.py) checks
one step against AsyncVectorEnv; these tests check the rows over sequences of
batches of different kinds, on all rows and on some (the EnvPool ``send``).
"""

from typing import Any, List

import numpy as np
import pytest
from gymnasium import spaces

from alf_env.front_ends.gym.action_items import ITEM_BYTES, action_layout
from alf_env.front_ends.gym.space_layout import SpaceLayout

NUM_ROWS = 4
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


def rows_of(layout: SpaceLayout) -> List[Any]:
    """A layout's views over plain arrays shaped like a block's fields."""
    return layout.views({name: np.zeros((NUM_ROWS, *shape), dtype)
                         for name, shape, dtype in layout.fields})


def write(layout: SpaceLayout, views: List[Any], batch: Any, rows: Any = slice(0, NUM_ROWS)
          ) -> None:
    n = len(range(NUM_ROWS)[rows]) if isinstance(rows, slice) else len(rows)
    layout.write_rows(views, rows, layout.encode_batch(batch, n, "same_kind"))


def kind_of(value: Any) -> tuple:
    if isinstance(value, (np.ndarray, np.generic)):
        return type(value).__name__, str(value.dtype), value.shape, value.tolist()
    return type(value).__name__, value


def test_an_action_leaf_takes_eight_bytes_per_element_and_a_kind_row():
    layout = action_layout(BOX)
    assert [(shape, dtype) for _, shape, dtype in layout.fields] == [
        ((2 * ITEM_BYTES,), np.dtype(np.uint8)), ((3,), np.dtype(np.int64))]


def test_rows_follow_each_batch_whatever_kind_the_last_one_was():
    layout = action_layout(BOX)
    views = rows_of(layout)
    f64 = np.arange(8, dtype=np.float64).reshape(4, 2) / 8
    f32 = f64.astype(np.float32)
    write(layout, views, f64)
    assert kind_of(layout.read_row(views, 1)) == ("ndarray", "float64", (2,), [0.25, 0.375])
    write(layout, views, f32)  # the space's own kind again: read as before
    assert kind_of(layout.read_row(views, 1)) == ("ndarray", "float32", (2,), [0.25, 0.375])
    write(layout, views, [[1, 2], [3, 4]], rows=np.array([3, 0]))  # two rows (send)
    assert kind_of(layout.read_row(views, 3)) == ("list", [1, 2])
    assert kind_of(layout.read_row(views, 0)) == ("list", [3, 4])
    assert kind_of(layout.read_row(views, 2)) == ("ndarray", "float32", (2,), [0.5, 0.625])
    write(layout, views, f32[:2], rows=slice(2, 4))
    assert kind_of(layout.read_row(views, 3)) == ("ndarray", "float32", (2,), [0.25, 0.375])
    assert kind_of(layout.read_row(views, 0)) == ("list", [3, 4])
    write(layout, views, f32)
    assert [kind_of(layout.read_row(views, r))[:2] for r in range(NUM_ROWS)] == [
        ("ndarray", "float32")] * NUM_ROWS


def test_the_exact_batch_writer_writes_the_spaces_own_batches_as_encode_batch_does():
    layout = action_layout(BOX)
    views, twin = rows_of(layout), rows_of(layout)
    write_exact = layout.exact_batch_writer(views, slice(0, NUM_ROWS), NUM_ROWS)
    assert write_exact is not None
    f32 = np.arange(8, dtype=np.float32).reshape(4, 2) / 8
    for batch in ([[1, 2], [3, 4], [5, 6], [7, 8]], f32, f32.astype(np.float64), f32[:3],
                  f32 + 1):
        written = write_exact(batch)
        # Only an array of the space's own dtype and (n, *shape) is taken, the
        # kinds a batch of another kind left behind are reset, and what a worker
        # reads is what the general path gives.
        exact = type(batch) is np.ndarray and batch.dtype == np.float32 and batch.shape == (4, 2)
        assert written is exact
        if not written:
            if len(batch) != NUM_ROWS:
                continue
            write(layout, views, batch)
        write(layout, twin, batch)
        assert [kind_of(layout.read_row(views, r)) for r in range(NUM_ROWS)] == [
            kind_of(layout.read_row(twin, r)) for r in range(NUM_ROWS)]


def test_a_layout_of_several_leaves_has_no_exact_batch_writer():
    layout = action_layout(spaces.Tuple((BOX, spaces.Discrete(3))))
    assert layout.exact_batch_writer(rows_of(layout), slice(0, NUM_ROWS), NUM_ROWS) is None


def test_items_of_mixed_kinds_are_rebuilt_one_by_one():
    layout = action_layout(BOX)
    views = rows_of(layout)
    batch = [np.array([0.5, 1.0]), (0.25, 2), np.float16(0.5), [True, False]]
    write(layout, views, batch)
    assert [kind_of(layout.read_row(views, r)) for r in range(NUM_ROWS)] == [
        ("ndarray", "float64", (2,), [0.5, 1.0]), ("tuple", (0.25, 2.0)),
        ("float16", "float16", (), 0.5), ("list", [True, False])]
    write(layout, views, batch)  # the same kinds again: the same items
    assert kind_of(layout.read_row(views, 1)) == ("tuple", (0.25, 2.0))


def test_every_value_of_a_wide_dtype_arrives_exactly():
    layout = action_layout(spaces.MultiDiscrete([3, 3], dtype=np.int64))
    views = rows_of(layout)
    big = np.array([[2**62 + 1, -(2**62) - 3]] * NUM_ROWS, np.int64)  # no float64 holds it
    write(layout, views, big)
    assert kind_of(layout.read_row(views, 2)) == ("ndarray", "int64", (2,), big[2].tolist())
    box = action_layout(BOX)
    box_views = rows_of(box)
    write(box, box_views, np.full((NUM_ROWS, 2), 1e-300))  # no float32 holds it
    assert kind_of(box.read_row(box_views, 0)) == ("ndarray", "float64", (2,), [1e-300] * 2)


def test_integers_of_any_kind_fit_an_integer_space_within_its_range():
    # numpy's "same_kind" does not take int64 to uint8; the values decide.
    layout = action_layout(spaces.MultiDiscrete([4], dtype=np.uint8))
    views = rows_of(layout)
    write(layout, views, [[1], [2], [3], [0]])
    assert kind_of(layout.read_row(views, 2)) == ("list", [3])


@pytest.mark.parametrize("space, batch, error, message", [
    (spaces.Discrete(3), 0, TypeError, "Unable to iterate over the following elements: 0"),
    (spaces.Discrete(3), np.int64(2), TypeError, "Unable to iterate"),
    (spaces.Discrete(3), [0, 1, 2], ValueError, r"action: expected 4 actions \(one per env\), "
                                                r"got 3"),
    (spaces.Discrete(3), [0, "a", 1, 2], ValueError,
     r"action: expected dtype int64 .*got env 1's action of dtype <U1"),
    (spaces.Discrete(3), [0, [0, 1], 1, 2], ValueError,
     r"env 1's action has shape \(2,\), which does not broadcast to the space's shape \(\)"),
    (BOX, np.zeros((NUM_ROWS, 2), np.longdouble), ValueError,
     r"of dtype float128 take more than 8 bytes per element"),
    (BOX, np.zeros((NUM_ROWS, 2), np.complex64), ValueError,
     r"expected dtype float32 .*got the actions of dtype complex64"),
    (spaces.MultiBinary(2), np.array([[0, 1], [1, 0], [0, 1], [-200, 1]]), ValueError,
     r"env 3's action holds -200, outside the range \[-128, 127\] of the space's dtype int8"),
    (spaces.MultiDiscrete([4], dtype=np.uint8), [[1], [2], [-1], [0]], ValueError,
     r"env 2's action holds -1, outside the range \[0, 255\]"),
])
def test_items_that_do_not_fit_are_refused(space, batch, error, message):
    with pytest.raises(error, match=message):
        action_layout(space).encode_batch(batch, NUM_ROWS, "same_kind")


def test_a_one_of_action_is_cast_into_the_chosen_sub_space():
    space = spaces.OneOf((spaces.Discrete(3), BOX))
    layout = action_layout(space)
    views = rows_of(layout)
    write(layout, views, [(0, 2), (1, np.array([0.5, 0.25])), (0, 1), (1, [1, 0])])
    index, value = layout.read_row(views, 1)
    assert int(index) == 1 and value.dtype == np.float32 and value.tolist() == [0.5, 0.25]
