"""compute_layout: control block first, 64-byte rows and arrays."""

import multiprocessing as mp

import pytest

from alf_env import _penv

LINE = _penv.CACHE_LINE_SIZE


def test_cache_line_is_64():
    assert LINE == 64


@pytest.mark.parametrize("num_workers", [1, 2, 3, 16, 100])
def test_control_block_size_depends_on_num_workers(num_workers):
    capacity = 2
    while capacity < num_workers:
        capacity *= 2
    # header + completion word + queue tail, one slot per worker, one cell per
    # queue entry: every part one cache line
    expected = (3 + num_workers + capacity) * LINE
    assert _penv.control_block_size(num_workers) == expected
    layout = _penv.compute_layout(num_workers, 4, [8])
    assert layout.control_size == expected
    assert layout.fields[0].offset == expected


def test_rows_and_arrays_are_cache_line_aligned_and_disjoint():
    row_bytes = [1, 63, 64, 65, 0, 4 * 84 * 84, 12]
    layout = _penv.compute_layout(5, 7, row_bytes)
    assert layout.num_workers == 5 and layout.num_rows == 7
    end = layout.control_size
    for requested, field in zip(row_bytes, layout.fields):
        assert field.row_bytes == requested
        assert field.offset % LINE == 0
        assert field.row_stride % LINE == 0
        assert field.row_stride >= max(requested, 1)
        assert field.row_stride < max(requested, 1) + LINE  # no waste
        assert field.offset >= end  # after the previous array
        end = field.offset + field.row_stride * 7
    assert layout.total_size == end


def test_row_strides():
    layout = _penv.compute_layout(1, 3, [1, 64, 65, 0])
    assert [f.row_stride for f in layout.fields] == [64, 64, 128, 64]


def test_no_fields_and_no_rows():
    layout = _penv.compute_layout(2, 0, [16, 32])
    assert layout.total_size == layout.control_size
    assert _penv.compute_layout(2, 3, []).total_size == layout.control_size


def _layout_in_child(conn):
    layout = _penv.compute_layout(3, 5, [10, 200, 0])
    conn.send([layout.control_size, layout.total_size,
               [(f.offset, f.row_stride) for f in layout.fields]])
    conn.close()


def test_same_result_in_another_process(start_process):
    parent_end, child_end = mp.Pipe()
    start_process(_layout_in_child, child_end, method="spawn")
    assert parent_end.poll(60)
    layout = _penv.compute_layout(3, 5, [10, 200, 0])
    assert parent_end.recv() == [layout.control_size, layout.total_size,
                                 [(f.offset, f.row_stride) for f in layout.fields]]


@pytest.mark.parametrize("num_workers", [0, _penv.MAX_WORKERS + 1])
def test_bad_num_workers(num_workers):
    with pytest.raises(ValueError, match=r"num_workers must be in \[1, 65536\]"):
        _penv.compute_layout(num_workers, 1, [8])


def test_overflow_is_reported():
    with pytest.raises(OverflowError, match="overflows"):
        _penv.compute_layout(1, 2**62, [2**10])
