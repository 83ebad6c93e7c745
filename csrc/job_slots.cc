#include "job_slots.h"

#include <chrono>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>

#include "futex.h"
#include "region.h"

namespace alf_env::penv {
namespace {

// Offsets of the fixed parts; job slots and queue cells follow.
constexpr std::size_t kHeaderOffset = 0;
constexpr std::size_t kCompletionOffset = kHeaderOffset + sizeof(ControlHeader);
constexpr std::size_t kQueueTailOffset =
    kCompletionOffset + sizeof(CompletionWord);
constexpr std::size_t kSlotsOffset = kQueueTailOffset + sizeof(QueueTail);

// Marks a control block that a Controller is initialising right now.
constexpr std::uint64_t kInitializingMagic = ~kControlMagic;

std::size_t cells_offset(std::size_t num_workers) {
  return kSlotsOffset + num_workers * sizeof(JobSlot);
}

std::string hex(std::uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

void check_region_size(const SharedRegion& region, std::size_t num_workers,
                       const char* who) {
  const std::size_t needed = ControlBlock::size_for(num_workers);
  if (region.size() < needed) {
    throw std::invalid_argument(
        std::string(who) + ": the region has " + std::to_string(region.size()) +
        " bytes, but the control block of " + std::to_string(num_workers) +
        " workers needs " + std::to_string(needed) +
        ". Size the region with compute_layout(num_workers, ...).total_size.");
  }
}

}  // namespace

void check_num_workers(std::size_t num_workers, const char* who) {
  if (num_workers == 0 || num_workers > kMaxWorkers) {
    throw std::invalid_argument(std::string(who) + ": num_workers must be in [1, " +
                                std::to_string(kMaxWorkers) + "], got " +
                                std::to_string(num_workers));
  }
}

std::size_t ControlBlock::size_for(std::size_t num_workers) {
  check_num_workers(num_workers, "control block");
  return cells_offset(num_workers) +
         FinishedQueue::capacity_for(num_workers) * sizeof(QueueCell);
}

ControlBlock::ControlBlock(std::uint8_t* base, std::size_t num_workers) noexcept
    : num_workers_(num_workers),
      header_(reinterpret_cast<ControlHeader*>(base + kHeaderOffset)),
      completion_(reinterpret_cast<CompletionWord*>(base + kCompletionOffset)),
      slots_(reinterpret_cast<JobSlot*>(base + kSlotsOffset)),
      queue_(reinterpret_cast<QueueTail*>(base + kQueueTailOffset),
             reinterpret_cast<QueueCell*>(base + cells_offset(num_workers)),
             FinishedQueue::capacity_for(num_workers)) {}

ControlBlock ControlBlock::initialize(SharedRegion& region,
                                      std::size_t num_workers) {
  check_num_workers(num_workers, "Controller");
  check_region_size(region, num_workers, "Controller");
  std::uint8_t* base = region.data();
  // The atomics are created here (placement new) in the fresh, zero-filled
  // mapping; workers only ever access them after seeing the magic.
  auto* header = new (base + kHeaderOffset) ControlHeader;
  std::uint64_t expected = 0;
  // acq_rel: claim the region against a second Controller (in any process);
  // acquire so a failure reports a fully published block below.
  if (!header->magic.compare_exchange_strong(expected, kInitializingMagic,
                                             std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
    throw std::invalid_argument(
        "Controller: the region already holds a control block (magic " +
        hex(expected) + "); create exactly one Controller per region, in the "
        "main process, before starting workers.");
  }
  header->layout_version = kLayoutVersion;
  header->num_workers = static_cast<std::uint32_t>(num_workers);
  header->queue_capacity = FinishedQueue::capacity_for(num_workers);
  header->reserved = 0;
  header->control_size = size_for(num_workers);

  ControlBlock block(base, num_workers);
  auto* completion = new (block.completion_) CompletionWord;
  // relaxed (all initial stores): published by the release store of magic.
  completion->count.store(0, std::memory_order_relaxed);
  completion->sleeping.store(kAwake, std::memory_order_relaxed);
  completion->wake_at.store(0, std::memory_order_relaxed);
  for (std::size_t w = 0; w < num_workers; ++w) {
    auto* slot = new (&block.slots_[w]) JobSlot;
    slot->seq.store(0, std::memory_order_relaxed);
    slot->sleeping.store(kAwake, std::memory_order_relaxed);
    slot->job_type.store(static_cast<std::uint32_t>(JobType::NONE),
                         std::memory_order_relaxed);
    slot->status.store(static_cast<std::uint32_t>(JobStatus::OK),
                       std::memory_order_relaxed);
    slot->arg.store(0, std::memory_order_relaxed);
    slot->done_seq.store(0, std::memory_order_relaxed);
    slot->job_wait_spin_us.store(
        static_cast<std::uint32_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(
                kAdaptiveMaxJobWaitSpin)
                .count()),
        std::memory_order_relaxed);
    slot->sleep_cpu.store(kUnknownCpu, std::memory_order_relaxed);
    slot->start_ns.store(0, std::memory_order_relaxed);
    slot->finish_ns.store(0, std::memory_order_relaxed);
  }
  new (base + kQueueTailOffset) QueueTail;
  for (std::size_t i = 0; i < block.queue_.capacity(); ++i) {
    new (base + cells_offset(num_workers) + i * sizeof(QueueCell)) QueueCell;
  }
  block.queue_.initialize();
  // release: a worker that acquire-loads the magic sees every store above.
  header->magic.store(kControlMagic, std::memory_order_release);
  return block;
}

ControlBlock ControlBlock::attach(SharedRegion& region,
                                  std::size_t num_workers) {
  check_num_workers(num_workers, "WorkerPort");
  check_region_size(region, num_workers, "WorkerPort");
  std::uint8_t* base = region.data();
  auto* header = reinterpret_cast<ControlHeader*>(base + kHeaderOffset);
  // acquire: pairs with the release store in initialize(), making the plain
  // header fields and the initial slot/queue state visible.
  const std::uint64_t magic = header->magic.load(std::memory_order_acquire);
  if (magic != kControlMagic) {
    throw std::invalid_argument(
        "WorkerPort: expected an initialised control block (magic " +
        hex(kControlMagic) + "), got magic " + hex(magic) +
        ". Create the Controller in the main process before workers attach, "
        "and attach to the same region.");
  }
  if (header->layout_version != kLayoutVersion) {
    throw std::invalid_argument(
        "WorkerPort: expected control-block layout version " +
        std::to_string(kLayoutVersion) + ", got " +
        std::to_string(header->layout_version) +
        ": the main process and this worker load different builds of "
        "alf_env._penv; reinstall alf_env so both use the same one.");
  }
  if (header->num_workers != num_workers) {
    throw std::invalid_argument(
        "WorkerPort: expected num_workers=" + std::to_string(num_workers) +
        ", but the control block was made for " +
        std::to_string(header->num_workers) +
        " workers; pass the Controller's num_workers.");
  }
  if (header->queue_capacity != FinishedQueue::capacity_for(num_workers) ||
      header->control_size != size_for(num_workers)) {
    throw std::invalid_argument(
        "WorkerPort: the control block's queue capacity/size (" +
        std::to_string(header->queue_capacity) + ", " +
        std::to_string(header->control_size) + " bytes) differ from this "
        "build's (" + std::to_string(FinishedQueue::capacity_for(num_workers)) +
        ", " + std::to_string(size_for(num_workers)) +
        " bytes): reinstall alf_env so all processes use the same build.");
  }
  return ControlBlock(base, num_workers);
}

}  // namespace alf_env::penv
