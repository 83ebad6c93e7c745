#include "finished_queue.h"

namespace alf_env::penv {
namespace {

constexpr int kTagShift = 32;
constexpr std::uint64_t kIdMask = 0xFFFFFFFFull;

std::uint64_t pack(std::uint32_t tag, std::uint32_t id) noexcept {
  return (static_cast<std::uint64_t>(tag) << kTagShift) | id;
}
std::uint32_t tag_of(std::uint64_t word) noexcept {
  return static_cast<std::uint32_t>(word >> kTagShift);
}
std::uint32_t id_of(std::uint64_t word) noexcept {
  return static_cast<std::uint32_t>(word & kIdMask);
}
// Tags are positions truncated to 32 bits; compare them modulo 2^32.
std::int32_t tag_distance(std::uint32_t tag, std::uint64_t position) noexcept {
  return static_cast<std::int32_t>(tag - static_cast<std::uint32_t>(position));
}

}  // namespace

std::uint32_t FinishedQueue::capacity_for(std::size_t max_items) {
  std::uint32_t capacity = 2;
  while (capacity < max_items) capacity <<= 1;
  return capacity;
}

FinishedQueue::FinishedQueue(QueueTail* tail, QueueCell* cells,
                             std::uint32_t capacity) noexcept
    : tail_(tail), cells_(cells), capacity_(capacity), mask_(capacity - 1) {}

void FinishedQueue::initialize() noexcept {
  for (std::uint64_t i = 0; i < capacity_; ++i) {
    // relaxed: nobody else looks yet; the caller publishes the whole control
    // block with one release store (ControlBlock's magic).
    cells_[i].word.store(pack(static_cast<std::uint32_t>(i), kNoId),
                         std::memory_order_relaxed);
  }
  // relaxed: published together with the cells, see above.
  tail_->position.store(0, std::memory_order_relaxed);
}

bool FinishedQueue::try_push(std::uint32_t id) noexcept {
  for (;;) {
    // relaxed: the tail is only a hint; the CAS on the cell below decides.
    std::uint64_t position = tail_->position.load(std::memory_order_relaxed);
    QueueCell& target = cell(position);
    // relaxed: only the value matters, as the CAS's expected value; nothing
    // is read through it (the payload is inside the word).
    std::uint64_t word = target.word.load(std::memory_order_relaxed);
    const std::int32_t distance = tag_distance(tag_of(word), position);
    if (distance == 0) {
      // The cell is free for `position`: claim and publish it in one step.
      // release on success: everything this worker wrote before finishing
      // (observation rows, job status, done_seq) becomes visible to the main
      // process once it acquire-loads this cell. relaxed on failure: another
      // producer won the cell; we start over.
      if (target.word.compare_exchange_strong(
              word, pack(static_cast<std::uint32_t>(position + 1), id),
              std::memory_order_release, std::memory_order_relaxed)) {
        // relaxed: a hint (see above); if this fails, someone helped already.
        tail_->position.compare_exchange_strong(position, position + 1,
                                                std::memory_order_relaxed,
                                                std::memory_order_relaxed);
        return true;
      }
    } else if (distance == 1) {
      // Filled for `position` by a producer that has not moved the tail yet
      // (or died before doing so): help. relaxed for the same reason.
      tail_->position.compare_exchange_strong(position, position + 1,
                                              std::memory_order_relaxed,
                                              std::memory_order_relaxed);
    } else if (distance < 0) {
      // Still holds an id from the previous lap: full - unless our view of
      // the tail was stale. relaxed: a hint, as above.
      if (tail_->position.load(std::memory_order_relaxed) == position) {
        return false;
      }
    }
    // distance > 1: we read an old tail; retry with a fresh one.
  }
}

bool FinishedQueue::try_pop(std::uint64_t& head, std::uint32_t& id) noexcept {
  QueueCell& target = cell(head);
  // acquire: pairs with the producer's release CAS, so the worker's writes
  // made before it finished are visible once we see its id.
  const std::uint64_t word = target.word.load(std::memory_order_acquire);
  if (tag_distance(tag_of(word), head) != 1) return false;
  id = id_of(word);
  // relaxed: frees the cell for position head + capacity. Nothing needs to be
  // ordered with it: the payload was read from the same atomic word (single-
  // location coherence orders our load before this store), and no producer
  // can touch a full cell.
  target.word.store(
      pack(static_cast<std::uint32_t>(head + capacity_), kNoId),
      std::memory_order_relaxed);
  ++head;
  return true;
}

bool FinishedQueue::ready(std::uint64_t head) const noexcept {
  // acquire: same pairing as in try_pop (a spin loop polls this).
  return tag_distance(tag_of(cell(head).word.load(std::memory_order_acquire)),
                      head) == 1;
}

}  // namespace alf_env::penv
