#include "worker_port.h"

#include <sched.h>
#include <time.h>

#include <stdexcept>
#include <string>

#include "busy_guard.h"
#include "protocol.h"
#include "region.h"

namespace alf_env::penv {
namespace {

std::size_t checked_index(std::size_t worker_index, std::size_t num_workers) {
  if (worker_index >= num_workers) {
    throw std::invalid_argument("WorkerPort: worker_index " +
                                std::to_string(worker_index) +
                                " is out of range; expected 0 <= index < " +
                                std::to_string(num_workers));
  }
  return worker_index;
}

// Back-off while the finished queue is full (only possible when completions
// of abandoned jobs pile up): yield a few times, then sleep briefly.
constexpr int kFullQueueYields = 16;
constexpr std::chrono::microseconds kFullQueueSleep{100};

}  // namespace

WorkerPort::WorkerPort(std::shared_ptr<SharedRegion> region,
                       std::size_t num_workers, std::size_t worker_index,
                       int spin_us, bool workers_spread)
    : region_(require_region(std::move(region), "WorkerPort")),
      block_(ControlBlock::attach(*region_, num_workers)),
      index_(checked_index(worker_index, num_workers)),
      spin_(spin_us, num_workers + 1, workers_spread, kAdaptiveMaxJobWaitSpin),
      spin_cap_us_(static_cast<std::uint32_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(
              kAdaptiveMaxJobWaitSpin)
              .count())),
      // relaxed: ControlBlock::attach acquired the magic; later changes of
      // done_seq are only made by this worker. Starting from the last
      // *finished* job means a job posted before we attached is not missed.
      seen_seq_(block_.slot(index_).done_seq.load(std::memory_order_relaxed)) {}

bool WorkerPort::try_take_job(Job& job) {
  JobSlot& slot = block_.slot(index_);
  // acquire: pairs with the main process's seq_cst (release) store in
  // post(); job_type, arg and the action rows written before it are visible.
  std::uint32_t seq = slot.seq.load(std::memory_order_acquire);
  for (;;) {
    if (seq == seen_seq_) return false;
    // relaxed: ordered by the acquire load of seq above.
    const auto type = slot.job_type.load(std::memory_order_relaxed);
    const auto arg = slot.arg.load(std::memory_order_relaxed);
    // acquire fence + re-check (seqlock-style): if another post landed while
    // we read (possible only around Controller::abandon), read again rather
    // than mix the fields of two posts.
    std::atomic_thread_fence(std::memory_order_acquire);
    // acquire: if seq moved on, the next round's reads see the newer job.
    const std::uint32_t again = slot.seq.load(std::memory_order_acquire);
    if (again != seq) {
      seq = again;
      continue;
    }
    seen_seq_ = seq;
    if (type == static_cast<std::uint32_t>(JobType::NONE) || type > kMaxJobType) {
      continue;  // cancelled by abandon(): nothing to do (seq == seen_seq_ now)
    }
    // relaxed: published with the job's completion (finish()'s release push).
    slot.start_ns.store(monotonic_ns(), std::memory_order_relaxed);
    job = Job{static_cast<JobType>(type), arg};
    current_seq_ = seq;
    has_job_ = true;
    return true;
  }
}

WorkerPort::Job WorkerPort::wait_job(const Deadline& deadline,
                                     const InterruptCheck& check) {
  BusyGuard guard(busy_, "WorkerPort.wait_job");
  if (has_job_) {
    throw std::logic_error(
        "WorkerPort.wait_job: the previous job is not finished; call "
        "finish(status) before waiting for the next job");
  }
  JobSlot& slot = block_.slot(index_);
  // relaxed: a tuning hint; nothing else is read through it, and a change
  // seen one wait late costs one wait at the old cap.
  const std::uint32_t cap_us = slot.job_wait_spin_us.load(std::memory_order_relaxed);
  if (cap_us != spin_cap_us_) {
    spin_cap_us_ = cap_us;
    spin_.set_cap(std::chrono::microseconds(cap_us));
  }
  Job job{JobType::NONE, 0};
  const std::uint64_t wait_start = monotonic_ns();
  bool slept = false;
  for (;;) {
    if (try_take_job(job)) {
      if (slept) spin_.record_wait(static_cast<std::int64_t>(monotonic_ns() - wait_start));
      return job;
    }
    if (deadline.passed()) return Job{JobType::NONE, 0};
    if (spin_.spin(
            // acquire: as in try_take_job (a cheap pre-check while spinning).
            [&] { return slot.seq.load(std::memory_order_acquire) != seen_seq_; },
            deadline.remaining(kMaxSleepSlice))) {
      continue;
    }
    // relaxed: a hint for the order of the main process's wakes, read with
    // no other data; a stale value costs at worst one wake in the old order.
    const int cpu = ::sched_getcpu();
    slot.sleep_cpu.store(cpu >= 0 ? static_cast<std::uint32_t>(cpu) : kUnknownCpu,
                         std::memory_order_relaxed);
    const FutexWaitResult result = sleep_on(
        slot.seq, seen_seq_, slot.sleeping, deadline.remaining(kMaxSleepSlice));
    slept = true;
    if (result == FutexWaitResult::kTimedOut ||
        result == FutexWaitResult::kInterrupted) {
      if (check) check();  // may throw (e.g. KeyboardInterrupt)
    }
  }
}

void WorkerPort::finish(JobStatus status, const InterruptCheck& check) {
  BusyGuard guard(busy_, "WorkerPort.finish");
  if (!has_job_) {
    throw std::logic_error(
        "WorkerPort.finish: there is no job to finish; call wait_job() and "
        "finish() once per job it returns");
  }
  const auto status_value = static_cast<std::uint32_t>(status);
  if (status_value > kMaxJobStatus) {
    throw std::invalid_argument("WorkerPort.finish: expected JobStatus OK or "
                                "ERROR, got " + std::to_string(status_value));
  }
  JobSlot& slot = block_.slot(index_);
  // relaxed (all three): published by the release CAS of try_push below,
  // together with the data rows this worker wrote.
  slot.finish_ns.store(monotonic_ns(), std::memory_order_relaxed);
  slot.status.store(status_value, std::memory_order_relaxed);
  slot.done_seq.store(current_seq_, std::memory_order_relaxed);
  const auto id = static_cast<std::uint32_t>(index_);
  for (int attempt = 0; !block_.queue().try_push(id); ++attempt) {
    // Full: the main process has not drained stale completions yet.
    if (attempt < kFullQueueYields) {
      ::sched_yield();
    } else {
      const timespec pause{0, std::chrono::nanoseconds(kFullQueueSleep).count()};
      ::nanosleep(&pause, nullptr);
      if (check && attempt % kFullQueueYields == 0) check();
    }
  }
  has_job_ = false;
  CompletionWord& completion = block_.completion();
  // seq_cst: the waker's change (C) of the handshake in futex.h, ordered
  // before our load of the main process's sleeping flag in wake_sleeper().
  const std::uint32_t reached =
      completion.count.fetch_add(1, std::memory_order_seq_cst) + 1;
  wake_sleeper_at(completion.count, completion.sleeping, completion.wake_at,
                  reached);
}

}  // namespace alf_env::penv
