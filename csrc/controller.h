// Controller: the main process's side of the job slots.
//
// Usage: post(ids, job) hands a job to each listed worker; wait(k) returns the
// first k workers that finished, in completion order (EnvPool-style "receive
// first K"); "step all and wait for all" is post(all) + wait(n).
//
// Bookkeeping (process-local): a worker is *outstanding* from post() until
// wait() returns its id (or abandon() forgets it). Completions that arrive
// beyond the k asked for stay queued, in order, for later wait() calls: a
// wait never loses a completion, whether it returns OK, TIMEOUT or
// WORKER_DIED, or is interrupted by an exception (e.g. KeyboardInterrupt).
//
// Waiting: spins per SpinPolicy, then sleeps on the completion futex in
// slices of at most kMaxSleepSlice. At least every kPidPollInterval, it
// polls (timeout 0) the pidfds of workers that are outstanding and not yet
// finished; a dead one ends the wait with WORKER_DIED, so a crash is reported
// within ~50 ms instead of hanging. Workers without a pid (see
// set_worker_pid) are not watched.
//
// On TIMEOUT, wait() returns no ids: completions that arrived in the
// meantime stay queued and come out of the next wait(). On WORKER_DIED it
// returns the dead workers' ids; their jobs stay outstanding until abandon().
//
// Timings: a *lockstep batch* is a STEP post() made while no job is
// outstanding, up to the wait() that returns its last worker, with no other
// post() or abandon() in between. For each, the Controller adds to
// take_timings() the wait (post() to that wait()'s return), the straggler
// spread (the last worker's finish minus the first's, from the job slots'
// finish_ns) and the hand-off overhead (the wait minus the slowest worker's
// finish_ns - start_ns): process-local counters, ~100 ns a batch.
//
// Not thread-safe: use one Controller from one thread (concurrent calls raise
// instead of deadlocking). One Controller per region.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "futex.h"
#include "job_slots.h"
#include "unique_fd.h"

namespace alf_env::penv {

class SharedRegion;

// Buckets of a timing histogram: below 8 ns one per ns; from there each
// power of two is split in 8 equal buckets (at most 1/8 of their value wide,
// HDR-histogram style), up to 2^64 ns. alf_env/data_plane/step_timings.py
// computes the same buckets (bucket_of) and reads percentiles from them.
inline constexpr std::size_t kTimingBuckets = 496;

inline std::size_t timing_bucket(std::uint64_t ns) noexcept {
  if (ns < 8) return static_cast<std::size_t>(ns);
  const int bits = 64 - __builtin_clzll(ns);
  return (static_cast<std::size_t>(bits - 3) << 3) |
         static_cast<std::size_t>((ns >> (bits - 4)) & 7);
}

// What Controller::take_timings() returns: per figure (0 wait, 1 straggler
// spread, 2 hand-off overhead; see Controller), the sum in ns and the
// histogram of the lockstep batches since the last take.
struct BatchTimings {
  static constexpr std::size_t kFigures = 3;
  std::uint64_t count = 0;
  std::array<std::uint64_t, kFigures> sum_ns{};
  std::array<std::array<std::uint64_t, kTimingBuckets>, kFigures> buckets{};
};

class Controller {
 public:
  struct WaitResult {
    WaitStatus status;
    std::vector<std::int32_t> workers;  // finished (OK) or dead (WORKER_DIED)
  };

  // Initialises the control block at the start of `region` for
  // `num_workers` workers. spin_us, workers_spread: see SpinPolicy (-1
  // adaptive, 0 never; whether the workers are spread over the CPUs).
  Controller(std::shared_ptr<SharedRegion> region, std::size_t num_workers,
             int spin_us = kSpinAdaptive, bool workers_spread = false);

  std::size_t num_workers() const noexcept { return num_workers_; }

  // Watches process `pid` as worker `worker` (pidfd_open). pid <= 0 stops
  // watching. Call again after replacing a worker process.
  void set_worker_pid(std::size_t worker, pid_t pid);

  // Posts `job` with `arg` to every worker in `workers`. Checks all ids
  // first (range, duplicates, nothing outstanding) and posts nothing if any
  // is bad (std::invalid_argument naming the worker).
  void post(const std::vector<std::int64_t>& workers, JobType job,
            std::int64_t arg);

  // The order in which post() wakes `workers` from this thread now: those
  // last asleep on another CPU first (in the given order), then those asleep
  // on the calling thread's CPU.
  std::vector<std::int64_t> wake_order(
      const std::vector<std::int64_t>& workers) const;

  // The CPU `worker` last went to sleep on, -1 if not known yet.
  std::int64_t sleep_cpu(std::int64_t worker) const;

  // Waits for k completions (0 <= k <= num_outstanding()). `check` runs after
  // every sleep slice and EINTR and may throw to abort the wait.
  WaitResult wait(std::size_t k, const Deadline& deadline,
                  const InterruptCheck& check);

  // post(workers, job, arg), then wait(workers.size()): a lockstep step's
  // round trip in one call. With a job outstanding it posts nothing and throws
  // std::invalid_argument (the first completions might not be these workers').
  WaitResult run(const std::vector<std::int64_t>& workers, JobType job,
                 std::int64_t arg, const Deadline& deadline,
                 const InterruptCheck& check);

  // Status of the worker's last finished job (meaningful once wait() has
  // returned the worker).
  JobStatus status(std::size_t worker) const;
  bool outstanding(std::size_t worker) const;
  std::size_t num_outstanding() const noexcept { return num_outstanding_; }

  // Forgets the outstanding job of `worker` (typically dead), including a
  // completion that is queued but not yet returned. Returns whether there
  // was a job to forget. A completion that still arrives for it is dropped.
  bool abandon(std::size_t worker);

  // Sets the cap of every worker's adaptive spin while it waits for its next
  // job (kJobWaitSpinModeCap: the spin mode's own cap); each worker applies
  // it at its next wait. Throws std::invalid_argument beyond kMaxSpinUs.
  void set_job_wait_spin_us(std::uint32_t cap_us);
  std::uint32_t job_wait_spin_us() const noexcept;

  std::chrono::nanoseconds spin_budget() const noexcept {
    return spin_.budget();
  }
  bool spin_yields_only() const noexcept { return spin_.yields_only(); }

  // The figures of the lockstep batches completed since the last call (see
  // the top of this file); resets them.
  BatchTimings take_timings();

 private:
  // Adds the lockstep batch that just completed to timings_.
  void record_batch();

  void check_worker(std::int64_t worker, const char* who) const;
  // wake_order() of ids already checked.
  std::vector<std::int64_t> order_wakes(const std::vector<std::int64_t>& workers) const;
  void drain();
  std::vector<std::int32_t> find_dead_workers();
  std::vector<std::int32_t> take(std::size_t k);

  std::shared_ptr<SharedRegion> region_;  // keeps the mapping alive
  std::size_t num_workers_;
  ControlBlock block_;
  SpinPolicy spin_;
  std::uint64_t queue_head_ = 0;              // consumer position
  std::vector<std::uint32_t> posted_seq_;     // seq of the last post
  std::vector<std::uint8_t> outstanding_;     // posted, not yet returned
  std::vector<std::uint8_t> finished_;        // popped, waiting in pending_
  std::deque<std::int32_t> pending_;          // finished, in completion order
  std::size_t num_outstanding_ = 0;
  std::vector<UniqueFd> pidfds_;
  std::chrono::steady_clock::time_point last_pid_poll_;
  bool batch_open_ = false;                   // a lockstep batch is running
  std::uint64_t batch_posted_ns_ = 0;         // when it was posted
  std::vector<std::int64_t> batch_workers_;   // its workers
  BatchTimings timings_;
  std::atomic<bool> busy_{false};
};

}  // namespace alf_env::penv
