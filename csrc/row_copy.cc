#include "row_copy.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace py = pybind11;

namespace alf_env::penv {

void strided_copy(char* dst, const py::ssize_t* dst_strides, const char* src,
                  const py::ssize_t* src_strides, const py::ssize_t* shape,
                  int ndim, std::size_t itemsize) {
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return;  // nothing to copy
  }
  // Fold the innermost dims that are contiguous on both sides into one run.
  std::size_t run = itemsize;
  int outer = ndim;
  while (outer > 0 &&
         dst_strides[outer - 1] == static_cast<py::ssize_t>(run) &&
         src_strides[outer - 1] == static_cast<py::ssize_t>(run)) {
    run *= static_cast<std::size_t>(shape[outer - 1]);
    --outer;
  }
  if (outer == 0) {
    std::memcpy(dst, src, run);
    return;
  }
  // Odometer over the outer dims.
  std::vector<py::ssize_t> index(static_cast<std::size_t>(outer), 0);
  for (;;) {
    std::memcpy(dst, src, run);
    int d = outer - 1;
    for (; d >= 0; --d) {
      dst += dst_strides[d];
      src += src_strides[d];
      if (++index[d] < shape[d]) break;
      dst -= dst_strides[d] * shape[d];
      src -= src_strides[d] * shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

namespace {

// numpy.generic, the base of numpy's scalar types. Looked up once and kept
// for the life of the process (never released: a static py::object would be
// destroyed after the interpreter it belongs to).
PyTypeObject* numpy_generic_type() {
  static PyTypeObject* const type = reinterpret_cast<PyTypeObject*>(
      py::object(py::module_::import("numpy").attr("generic")).release().ptr());
  return type;
}

// Stores the Python int `value` into the 0-d integer row `out` if the row is
// a native signed or unsigned integer of 1-8 bytes and the value is in its
// range (np.asarray(value, dtype) raises OverflowError otherwise: the
// caller's path decides). Returns whether it stored it.
template <typename Int>
bool store_int(PyObject* value, py::array& out, PyObject* descr,
               const py::detail::npy_api& api) {
  if (!api.PyArray_EquivTypes_(descr, py::dtype::of<Int>().ptr())) return false;
  int overflow = 0;
  const long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (overflow != 0 || (number == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;  // beyond long long (a uint64 above 2**63 too): the slow path
  }
  if constexpr (std::is_signed_v<Int>) {
    if (number < static_cast<long long>(std::numeric_limits<Int>::min()) ||
        number > static_cast<long long>(std::numeric_limits<Int>::max())) {
      return false;
    }
  } else {
    if (number < 0 || static_cast<unsigned long long>(number) >
                          std::numeric_limits<Int>::max()) {
      return false;
    }
  }
  const Int stored = static_cast<Int>(number);
  std::memcpy(out.mutable_data(), &stored, sizeof stored);
  return true;
}

}  // namespace

bool copy_scalar(py::handle leaf, py::array& out) {
  if (out.ndim() != 0) return false;
  PyObject* value = leaf.ptr();
  const auto& api = py::detail::npy_api::get();
  auto* out_descr = py::detail::array_proxy(out.ptr())->descr;
  auto is = [&](const py::dtype& dtype) {
    return api.PyArray_EquivTypes_(out_descr, dtype.ptr()) != 0;
  };
  if (PyBool_Check(value)) {
    if (!is(py::dtype::of<bool>())) return false;
    *static_cast<std::uint8_t*>(out.mutable_data()) = value == Py_True ? 1 : 0;
    return true;
  }
  if (PyFloat_Check(value)) {  // numpy's float64 scalars included
    const double number = PyFloat_AsDouble(value);  // a float: cannot fail
    if (is(py::dtype::of<double>())) {
      std::memcpy(out.mutable_data(), &number, sizeof number);
      return true;
    }
    if (is(py::dtype::of<float>())) {
      const float rounded = static_cast<float>(number);
      std::memcpy(out.mutable_data(), &rounded, sizeof rounded);
      return true;
    }
    return false;
  }
  if (PyLong_CheckExact(value)) {  // a Python int (not a bool, not a subclass)
    return store_int<std::int64_t>(value, out, out_descr, api) ||
           store_int<std::int32_t>(value, out, out_descr, api) ||
           store_int<std::int16_t>(value, out, out_descr, api) ||
           store_int<std::int8_t>(value, out, out_descr, api) ||
           store_int<std::uint64_t>(value, out, out_descr, api) ||
           store_int<std::uint32_t>(value, out, out_descr, api) ||
           store_int<std::uint16_t>(value, out, out_descr, api) ||
           store_int<std::uint8_t>(value, out, out_descr, api);
  }
  if (PyObject_TypeCheck(value, numpy_generic_type())) {
    // A numpy scalar (np.float32, np.bool_, np.int64, ...): its bytes, when
    // its dtype is the row's (no conversion at all).
    auto descr = py::reinterpret_steal<py::object>(
        api.PyArray_DescrFromScalar_(value));
    if (!descr) throw py::error_already_set();
    if (!api.PyArray_EquivTypes_(out_descr, descr.ptr())) return false;
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      return false;  // no buffer (e.g. a void scalar): the slow path
    }
    const bool fits = view.len == out.itemsize();
    if (fits) std::memcpy(out.mutable_data(), view.buf, static_cast<std::size_t>(view.len));
    PyBuffer_Release(&view);
    return fits;
  }
  return false;
}

std::size_t copy_leaves(const py::sequence& dst, const py::sequence& src,
                        bool scalars) {
  const std::size_t n = py::len(dst);
  if (py::len(src) != n) {
    throw py::value_error("copy_leaves: expected as many leaves as rows (" +
                          std::to_string(n) + "), got " +
                          std::to_string(py::len(src)));
  }
  const auto& api = py::detail::npy_api::get();
  for (std::size_t i = 0; i < n; ++i) {
    py::object target = dst[i];
    if (!py::isinstance<py::array>(target)) {
      throw py::value_error("copy_leaves: dst[" + std::to_string(i) +
                            "] must be a numpy array (a row view), got " +
                            std::string(py::str(py::type::of(target))));
    }
    auto out = py::reinterpret_borrow<py::array>(target);
    if (!out.writeable()) {
      throw py::value_error("copy_leaves: dst[" + std::to_string(i) +
                            "] is read-only; expected a writable row view");
    }
    // NPY_ITEM_HASOBJECT: bytes of such arrays are references, not values.
    constexpr std::uint64_t kHasObject = 0x01;
    if (out.dtype().flags() & kHasObject) {
      throw py::value_error("copy_leaves: dst[" + std::to_string(i) +
                            "] has dtype " + std::string(py::str(out.dtype())) +
                            "; expected a plain-data dtype (rows hold bytes)");
    }
    py::object leaf = src[i];
    if (!py::isinstance<py::array>(leaf)) {
      if (scalars && copy_scalar(leaf, out)) continue;
      return i;  // scalar, list, ...: slow path
    }
    auto in = py::reinterpret_borrow<py::array>(leaf);
    const int ndim = static_cast<int>(in.ndim());
    if (ndim != out.ndim()) return i;
    for (int d = 0; d < ndim; ++d) {
      if (in.shape(d) != out.shape(d)) return i;
    }
    auto* in_descr = py::detail::array_proxy(in.ptr())->descr;
    auto* out_descr = py::detail::array_proxy(out.ptr())->descr;
    if (in_descr != out_descr && !api.PyArray_EquivTypes_(in_descr, out_descr)) {
      return i;
    }
    strided_copy(static_cast<char*>(out.mutable_data()), out.strides(),
                 static_cast<const char*>(in.data()), in.strides(), out.shape(),
                 ndim, static_cast<std::size_t>(out.itemsize()));
  }
  return n;
}

}  // namespace alf_env::penv
