// FinishedQueue: the bounded lock-free multi-producer, single-consumer queue
// of finished worker ids, laid out in shared memory.
//
// Shape: Vyukov's bounded queue. `capacity` (a power of two >= 2) cells, each
// tagged with a sequence number derived from the queue position it is meant
// for; producers move a shared tail, the single consumer (the main process)
// keeps its head privately. Cell i is, for laps L = 0, 1, ...:
//   free for position p = i + L*capacity   when its tag == p (mod 2^32),
//   full with the id pushed at position p  when its tag == p + 1.
// Popping position p re-tags the cell p + capacity (free for the next lap).
//
// One change against Vyukov's original, for crash safety: there a producer
// claims a position (CAS on the tail) and later publishes its cell (a store)
// - a producer SIGKILLed between the two leaves a hole that blocks the
// consumer forever. Here tag and id share one 64-bit word, so one CAS claims
// AND publishes a cell; the tail is only a hint that every producer helps
// advance (like Michael & Scott's queue). A producer that dies at any point
// either pushed its id or left no trace.
//
// Memory orders are explained at every atomic operation in
// finished_queue.cc. In short: the successful push CAS is a release (it
// publishes the worker's writes to its job slot and data rows) and the
// consumer's load of the cell is an acquire.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "protocol.h"

namespace alf_env::penv {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "queue cells need lock-free 64-bit atomics (address-free, so "
              "they work between processes)");

// One queue cell: (tag << 32) | worker id. Own cache line, so the consumer
// emptying cell i does not slow down a producer filling cell i + 1.
struct alignas(kCacheLineSize) QueueCell {
  std::atomic<std::uint64_t> word;
};

// The shared tail hint: the next position producers try to fill.
struct alignas(kCacheLineSize) QueueTail {
  std::atomic<std::uint64_t> position;
};

class FinishedQueue {
 public:
  // Id stored in empty cells (never a worker id: ids are < kMaxWorkers).
  static constexpr std::uint32_t kNoId = 0xFFFFFFFFu;

  // Smallest power of two >= max(max_items, 2). Two is the minimum: with a
  // single cell, "full from the previous lap" and "free" would share a tag.
  static std::uint32_t capacity_for(std::size_t max_items);

  // The queue lives in `tail` and `cells[0 .. capacity)` (shared memory).
  FinishedQueue(QueueTail* tail, QueueCell* cells,
                std::uint32_t capacity) noexcept;

  // Empties the queue. Only before any producer or consumer uses it; the
  // caller publishes the result (ControlBlock does so with a release store).
  void initialize() noexcept;

  // Producers (workers): appends `id`; false if the queue is full.
  bool try_push(std::uint32_t id) noexcept;

  // The consumer (main process only): pops the id at position `head` (the
  // consumer's private counter, starting at 0) into `id` and advances `head`;
  // false if the queue is empty.
  bool try_pop(std::uint64_t& head, std::uint32_t& id) noexcept;

  // The consumer: whether try_pop(head) would succeed now (for spinning).
  bool ready(std::uint64_t head) const noexcept;

  std::uint32_t capacity() const noexcept { return capacity_; }

 private:
  QueueCell& cell(std::uint64_t position) const noexcept {
    return cells_[position & mask_];
  }

  QueueTail* tail_;
  QueueCell* cells_;
  std::uint32_t capacity_;
  std::uint64_t mask_;
};

}  // namespace alf_env::penv
