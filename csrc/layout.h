// Layout of a shared block: where the control block and every data field
// live inside one SharedRegion.
//
//   [ control block | pad ][ field 0: num_rows rows ][ field 1 ] ...
//
// * The control block (job_slots.h) comes first; its size depends only on
//   num_workers.
// * Each field is an array of num_rows rows of row_bytes bytes. Every row
//   starts on a cache line: row_stride = row_bytes rounded up to a multiple
//   of kCacheLineSize (at least one line), so workers writing neighbouring
//   rows never share a line (no false sharing).
// * Every array starts on a cache-line boundary (64-byte alignment also
//   satisfies every numpy dtype).
// compute_layout is a pure function of its arguments, so every process that
// calls it with the same arguments gets the same offsets.
#pragma once

#include <cstddef>
#include <vector>

namespace alf_env::penv {

struct FieldLayout {
  std::size_t offset;      // from the start of the region
  std::size_t row_stride;  // bytes from one row to the next
  std::size_t row_bytes;   // bytes of payload per row (as requested)
};

struct Layout {
  std::size_t num_workers;
  std::size_t num_rows;
  std::size_t control_size;  // bytes of the control block at offset 0
  std::size_t total_size;    // bytes of the whole region
  std::vector<FieldLayout> fields;
};

// Throws std::invalid_argument (bad num_workers) or std::overflow_error
// (sizes that do not fit in size_t).
Layout compute_layout(std::size_t num_workers, std::size_t num_rows,
                      const std::vector<std::size_t>& row_bytes);

}  // namespace alf_env::penv
