// Copying a worker's results into its shared rows in one native call.
//
// A worker's job handler has, per step, a handful of small numpy arrays (the
// leaves of a time step) to store into views of its rows. Doing it leaf by
// leaf in Python costs ~0.4 us per leaf in interpreter overhead, which is a
// large part of a trivial env's step; copy_leaves() does the common case --
// every leaf already an ndarray of the row's exact shape and dtype, or a
// scalar stored exactly (copy_scalar) -- in one call, and leaves anything
// else (casts, wrong shapes, other scalars) to the caller's slower path,
// which converts or raises a precise error.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>

namespace alf_env::penv {

// Copies src[i] into dst[i] for i = 0, 1, ... as long as src[i] is a numpy
// array with dst[i]'s shape and an equivalent dtype (any strides on either
// side), or, with `scalars`, a scalar that copy_scalar() takes. Returns the
// number of leaves copied: the first leaf it could not copy this way, or
// len(dst) when all were. dst[i] must be writable numpy arrays (else
// ValueError naming the index); len(src) must equal len(dst) (else
// ValueError with both lengths). Runs with the GIL held (the copies are
// small, and the caller owns the rows).
std::size_t copy_leaves(const pybind11::sequence& dst,
                        const pybind11::sequence& src, bool scalars);

// Stores a scalar into a 0-d native row, holding the value
// np.asarray(leaf, dtype=row.dtype) would hold, when that is exact or a plain
// float rounding:
//   * a Python float (numpy's float64 scalars are floats too) into a float64
//     or float32 row (float64 -> float32 by C's conversion, as numpy casts);
//   * a Python bool into a bool row;
//   * a Python int (exactly int) into a signed or unsigned integer row of 1-8
//     bytes, when it is in the row's range (numpy raises OverflowError
//     otherwise);
//   * a numpy scalar (np.float32, np.bool_, np.int64, ...) whose dtype is
//     the row's: its bytes.
// Returns false, storing nothing, for anything else (the caller's converting
// path decides).
bool copy_scalar(pybind11::handle leaf, pybind11::array& out);

// The strided copy under copy_leaves(): `ndim` dims of `shape`, elements of
// `itemsize` bytes, byte strides per side. Copies the innermost run that is
// contiguous on both sides with one memcpy.
void strided_copy(char* dst, const pybind11::ssize_t* dst_strides,
                  const char* src, const pybind11::ssize_t* src_strides,
                  const pybind11::ssize_t* shape, int ndim,
                  std::size_t itemsize);

}  // namespace alf_env::penv
