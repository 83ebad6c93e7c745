// The control block: the part of the shared region through which the main
// process hands jobs to workers and learns which workers finished.
//
// Layout (all parts cache-line aligned, offsets from the region start):
//     0                ControlHeader   magic, layout version, num_workers, ...
//     64               CompletionWord  the main process's futex word + flag
//     128              QueueTail       tail hint of the finished queue
//     192              JobSlot[num_workers]
//     192+64*n         QueueCell[capacity_for(n)]
// size_for(n) is the total; data arrays follow it (see layout.h).
//
// Job-slot state machine (one job at a time per worker):
//   idle      the worker has seen seq (done_seq == seq, or seq is a
//             cancelled post, see below); the main process may post.
//   posted    main: writes job_type, arg (relaxed), then seq = seq + 1
//             (seq_cst store: release publishes the action rows + job,
//             seq_cst for the sleeping-flag handshake), then wakes the worker
//             if its `sleeping` flag is set.
//   running   worker: acquire-loads seq != last seen, reads job_type, arg,
//             stores start_ns (relaxed).
//   finished  worker: writes its data rows, status, finish_ns, done_seq = seq
//             (relaxed), pushes its id on the finished queue (release CAS),
//             bumps CompletionWord::count (seq_cst) and wakes the main
//             process if it sleeps.
//   received  main: acquire-pops the id, checks done_seq == the seq it
//             posted (a completion that does not match, e.g. from an
//             abandoned job, is dropped), reads status and data rows.
//   cancelled main (abandon): posts JobType::NONE with seq + 1, so that a
//             process attaching to the slot later does not run the abandoned
//             job; workers skip NONE posts. A late completion of the
//             abandoned job is dropped by the done_seq check above.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "finished_queue.h"
#include "protocol.h"

namespace alf_env::penv {

class SharedRegion;

enum class JobType : std::uint32_t {
  NONE = 0,   // no job (wait_job timed out)
  STEP = 1,   // step with the action in your rows
  RESET = 2,  // reset
  CALL = 3,   // a message waits on your pipe: handle it and report
  CLOSE = 4,  // leave the job loop
};
inline constexpr std::uint32_t kMaxJobType =
    static_cast<std::uint32_t>(JobType::CLOSE);

enum class JobStatus : std::uint32_t {
  OK = 0,
  ERROR = 1,  // the worker's Python code raised; details travel on the pipe
};
inline constexpr std::uint32_t kMaxJobStatus =
    static_cast<std::uint32_t>(JobStatus::ERROR);

enum class WaitStatus : std::uint32_t {
  OK = 0,
  TIMEOUT = 1,
  WORKER_DIED = 2,
};

// Written once by the main process before it publishes `magic`; read-only
// afterwards (plain fields: ordered by magic's release/acquire).
struct alignas(kCacheLineSize) ControlHeader {
  std::atomic<std::uint64_t> magic;
  std::uint32_t layout_version;
  std::uint32_t num_workers;
  std::uint32_t queue_capacity;
  std::uint32_t reserved;
  std::uint64_t control_size;
};

// The main process sleeps on `count` while waiting for completions. It
// publishes in `wake_at` the count it needs before it sleeps, so a worker
// wakes it only with the completion that reaches it: a wait for k jobs costs
// the main process one wake-up, not k (each of which would preempt a worker
// when workers outnumber cores).
struct alignas(kCacheLineSize) CompletionWord {
  std::atomic<std::uint32_t> count;     // futex word: +1 per finished job
  std::atomic<std::uint32_t> sleeping;  // kSleeping while main sleeps
  std::atomic<std::uint32_t> wake_at;   // wake main once count reaches this
};

// One worker's mailbox. Written by the main process: seq, job_type, arg,
// job_wait_spin_us; by the worker: sleeping, sleep_cpu, status, done_seq,
// start_ns, finish_ns.
struct alignas(kCacheLineSize) JobSlot {
  std::atomic<std::uint32_t> seq;       // futex word: +1 per posted job
  std::atomic<std::uint32_t> sleeping;  // kSleeping while the worker sleeps
  std::atomic<std::uint32_t> job_type;  // a JobType
  std::atomic<std::uint32_t> status;    // a JobStatus of the finished job
  std::atomic<std::int64_t> arg;        // the job's 64-bit argument
  std::atomic<std::uint32_t> done_seq;  // seq of the last finished job
  // Cap (µs) of the adaptive spin while waiting for the next job;
  // kJobWaitSpinModeCap: the spin mode's own cap (see futex.h).
  std::atomic<std::uint32_t> job_wait_spin_us;
  // The CPU the worker last went to sleep on (kUnknownCpu: not known). A
  // hint for the order of the main process's wakes (Controller::wake_order).
  std::atomic<std::uint32_t> sleep_cpu;
  // CLOCK_MONOTONIC (monotonic_ns) when the worker took its last job and
  // when it finished it: the per-batch figures of Controller::take_timings.
  // Published with the job's completion (see finished above).
  std::atomic<std::uint64_t> start_ns;
  std::atomic<std::uint64_t> finish_ns;
};

inline constexpr std::uint32_t kUnknownCpu = 0xffffffffu;

// CLOCK_MONOTONIC in ns: one clock for every process of the machine (vDSO,
// ~20 ns), so a worker's job clocks and the main process's compare directly.
inline std::uint64_t monotonic_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(now.tv_nsec);
}

static_assert(sizeof(ControlHeader) == kCacheLineSize &&
                  sizeof(CompletionWord) == kCacheLineSize &&
                  sizeof(QueueTail) == kCacheLineSize &&
                  sizeof(JobSlot) == kCacheLineSize &&
                  sizeof(QueueCell) == kCacheLineSize,
              "every control-block part must take exactly one cache line");

// A view of the control block at the start of a SharedRegion. Cheap to copy;
// does not own the region (its users keep the region alive).
class ControlBlock {
 public:
  // Bytes taken by the control block of `num_workers` workers.
  static std::size_t size_for(std::size_t num_workers);

  // Main process: lays out a fresh control block and publishes it. Fails if
  // the region already holds one (one Controller per region).
  static ControlBlock initialize(SharedRegion& region, std::size_t num_workers);

  // Worker: validates the header (magic, layout version, num_workers, sizes)
  // and fails loudly, saying what differs, on any mismatch.
  static ControlBlock attach(SharedRegion& region, std::size_t num_workers);

  std::size_t num_workers() const noexcept { return num_workers_; }
  JobSlot& slot(std::size_t worker) const noexcept { return slots_[worker]; }
  CompletionWord& completion() const noexcept { return *completion_; }
  FinishedQueue& queue() noexcept { return queue_; }

 private:
  ControlBlock(std::uint8_t* base, std::size_t num_workers) noexcept;

  std::size_t num_workers_;
  ControlHeader* header_;
  CompletionWord* completion_;
  JobSlot* slots_;
  FinishedQueue queue_;
};

// Throws std::invalid_argument unless 1 <= num_workers <= kMaxWorkers.
void check_num_workers(std::size_t num_workers, const char* who);

}  // namespace alf_env::penv
