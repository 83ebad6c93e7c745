"""Tests of _penv._copy_leaves (csrc/row_copy.cc): one native call per time step."""

import numpy as np
import pytest

from alf_env import _penv
from alf_env.data_plane.shared_block import SharedBlock


def test_copies_exact_arrays_into_row_views():
    block = SharedBlock([("a", (4,), np.float32), ("b", (), np.int32), ("c", (2, 3), np.uint8)],
                        num_rows=3, num_workers=3)
    rows = [block.views[name][1, ...] for name in ("a", "b", "c")]  # views, also 0-d
    leaves = [np.arange(4, dtype=np.float32), np.array(7, np.int32),
              np.arange(6, dtype=np.uint8).reshape(2, 3)]
    assert _penv._copy_leaves(rows, leaves) == 3
    for row, leaf in zip(rows, leaves):
        np.testing.assert_array_equal(row, leaf)
    # Only row 1 was written.
    for name in ("a", "b", "c"):
        assert not block.views[name][0].any() and not block.views[name][2].any()


def test_strided_sources_and_destinations():
    # A batched env's block of rows is strided (rows padded to cache lines),
    # and a source may be any view.
    block = SharedBlock([("x", (3,), np.float64)], num_rows=4, num_workers=2)
    rows = block.views["x"][1:3]
    assert not rows.flags.c_contiguous
    source = np.arange(12, dtype=np.float64).reshape(2, 6)[:, ::2]
    assert _penv._copy_leaves([rows], [source]) == 1
    np.testing.assert_array_equal(rows, source)
    transposed = np.arange(6, dtype=np.float64).reshape(3, 2).T
    assert _penv._copy_leaves([rows], [transposed]) == 1
    np.testing.assert_array_equal(rows, transposed)


@pytest.mark.parametrize("leaf", [
    3.5,                                   # a Python scalar
    np.float32(3.5),                       # a numpy scalar, not an array
    np.array([1.0, 2.0], np.float64),      # a dtype that needs a cast
    np.zeros(3, np.float32),               # the wrong shape
    [1.0, 2.0],                            # a list
])
def test_stops_at_the_first_leaf_that_needs_the_checking_path(leaf):
    dst = [np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32)]
    src = [np.ones(2, np.float32), leaf, np.full(2, 5, np.float32)]
    assert _penv._copy_leaves(dst, src) == 1
    np.testing.assert_array_equal(dst[0], [1, 1])
    assert not dst[1].any() and not dst[2].any()  # nothing after the stop


def test_equivalent_dtypes_and_empty_arrays():
    dst = [np.zeros(2, np.dtype("<i8")), np.zeros((0, 3), np.float32)]
    src = [np.array([3, 4], np.dtype("=i8")), np.zeros((0, 3), np.float32)]
    assert _penv._copy_leaves(dst, src) == 2
    np.testing.assert_array_equal(dst[0], [3, 4])


def test_bad_destinations_and_lengths():
    with pytest.raises(ValueError, match=r"expected as many leaves as rows \(2\), got 1"):
        _penv._copy_leaves([np.zeros(1), np.zeros(1)], [np.zeros(1)])
    read_only = np.zeros(2)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match=r"dst\[0\] is read-only"):
        _penv._copy_leaves([read_only], [np.ones(2)])
    with pytest.raises(ValueError, match=r"dst\[0\] must be a numpy array"):
        _penv._copy_leaves([[0.0, 0.0]], [np.ones(2)])
    with pytest.raises(ValueError, match=r"dst\[0\] has dtype object"):
        _penv._copy_leaves([np.empty(2, object)], [np.empty(2, object)])


@pytest.mark.parametrize("value,dtype", [
    (3.1, np.float64), (3.1, np.float32), (np.float64(-2.7), np.float32),
    (np.float64(1e300), np.float32), (float("nan"), np.float32), (-0.0, np.float64),
    (1e-46, np.float32), (True, np.bool_), (False, np.bool_),
    # Python ints into integer rows of every size and sign, at the range's ends.
    (3, np.int64), (-2**63, np.int64), (2**63 - 1, np.int64), (-2**31, np.int32),
    (2**31 - 1, np.int32), (-2**7, np.int8), (127, np.int8), (-2**15, np.int16),
    (255, np.uint8), (0, np.uint8), (2**32 - 1, np.uint32), (2**63 - 1, np.uint64),
    (65535, np.uint16),
    # numpy scalars of the row's own dtype: their bytes.
    (np.float32(1.5), np.float32), (np.float32("nan"), np.float32), (np.bool_(True), np.bool_),
    (np.int64(-7), np.int64), (np.int32(9), np.int32), (np.uint8(200), np.uint8),
    (np.float16(0.1), np.float16), (np.complex64(1 + 2j), np.complex64),
])
def test_scalars_are_stored_as_numpy_converts_them(value, dtype):
    block = SharedBlock([("r", (), dtype)], num_rows=2, num_workers=1)
    row = block.views["r"][1, ...]
    with np.errstate(over="ignore"):
        expected = np.asarray(value, dtype=dtype)
    assert _penv._copy_leaves([row], [value], scalars=True) == 1
    assert row.tobytes() == expected.tobytes()
    assert _penv._copy_leaves([row], [value]) == 0  # only when asked for
    block.close()


@pytest.mark.parametrize("value,dtype,shape", [
    (3, np.float32, ()),             # a Python int for a float row: the checking path decides
    (3, np.bool_, ()),               # ... or for a bool row
    (True, np.int64, ()),            # a bool for an integer row
    (2**31, np.int32, ()),           # an int out of the row's range (numpy raises)
    (-1, np.uint8, ()),
    (256, np.uint8, ()),
    (2**63, np.uint64, ()),          # beyond long long: left to numpy
    (-2**63 - 1, np.int64, ()),
    (3, np.dtype(">i8"), ()),        # a swapped int64 row
    (np.float32(1.5), np.float64, ()),  # a numpy scalar of another dtype
    (np.int32(3), np.int64, ()),
    (np.float32(1.5), np.dtype(">f4"), ()),  # ... or another byte order
    (np.bool_(True), np.uint8, ()),
    (np.float32(1.5), np.float32, (1,)),  # a row that is not 0-d
    (1.5, np.int32, ()),             # a float for an integer row
    (True, np.float32, ()),          # a bool for a float row
    (1.5, np.bool_, ()),             # a float for a bool row
    (1.5, np.float32, (1,)),         # a row that is not 0-d
    (1.5, np.dtype(">f8"), ()),      # a swapped float64 row
])
def test_other_scalars_stop_the_native_copy(value, dtype, shape):
    row = np.zeros(shape, dtype)
    assert _penv._copy_leaves([row], [value], scalars=True) == 0
    assert not row.any()
