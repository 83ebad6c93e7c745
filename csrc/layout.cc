#include "layout.h"

#include <limits>
#include <stdexcept>
#include <string>

#include "job_slots.h"
#include "protocol.h"

namespace alf_env::penv {
namespace {

std::size_t checked_add(std::size_t a, std::size_t b) {
  if (a > std::numeric_limits<std::size_t>::max() - b) {
    throw std::overflow_error("compute_layout: the block size overflows size_t "
                              "(fields or num_rows far too large)");
  }
  return a + b;
}

std::size_t checked_mul(std::size_t a, std::size_t b) {
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) {
    throw std::overflow_error("compute_layout: the block size overflows size_t "
                              "(fields or num_rows far too large)");
  }
  return a * b;
}

std::size_t round_up_to_line(std::size_t bytes) {
  const std::size_t lines =
      checked_add(bytes, kCacheLineSize - 1) / kCacheLineSize;
  return lines * kCacheLineSize;
}

}  // namespace

Layout compute_layout(std::size_t num_workers, std::size_t num_rows,
                      const std::vector<std::size_t>& row_bytes) {
  Layout layout;
  layout.num_workers = num_workers;
  layout.num_rows = num_rows;
  layout.control_size = ControlBlock::size_for(num_workers);  // validates
  std::size_t offset = round_up_to_line(layout.control_size);
  layout.fields.reserve(row_bytes.size());
  for (std::size_t bytes : row_bytes) {
    // A zero-byte row still gets one line, so every row has its own address.
    const std::size_t stride = bytes == 0 ? kCacheLineSize : round_up_to_line(bytes);
    layout.fields.push_back(FieldLayout{offset, stride, bytes});
    offset = checked_add(offset, checked_mul(stride, num_rows));
  }
  layout.total_size = offset;
  return layout;
}

}  // namespace alf_env::penv
