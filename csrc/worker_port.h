// WorkerPort: a worker process's side of its job slot.
//
// Loop of a worker:
//     port = WorkerPort(region, num_workers, index)
//     while True:
//         job, arg = port.wait_job(timeout_s=1.0)
//         if job == NONE: check the parent / the pipe; continue
//         ... read the action rows, write the observation rows ...
//         port.finish(JobStatus.OK)   # or ERROR, details on the pipe
//         if job == CLOSE: break
//
// wait_job() spins per SpinPolicy, capped by the slot's job_wait_spin_us
// (set by the main process, read at every wait), and then sleeps on the
// slot's seq futex
// (in slices of at most kMaxSleepSlice, checking Python signals in between).
// It returns JobType::NONE when the timeout passes, so a Python worker can
// periodically check for parent death or pipe traffic. Jobs posted before
// the port was created are not missed (the port starts from the slot's last
// *finished* job). NONE "jobs" (posted by Controller::abandon) are skipped.
//
// finish() records the status, publishes the worker id on the finished
// queue (release: the rows written before are visible to the main process
// when it pops the id) and wakes the main process if it sleeps.
//
// Not thread-safe: one WorkerPort per worker slot, used from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "futex.h"
#include "job_slots.h"

namespace alf_env::penv {

class SharedRegion;

class WorkerPort {
 public:
  struct Job {
    JobType type;
    std::int64_t arg;
  };

  // Attaches to the control block (validating it) as worker `worker_index`.
  // spin_us, workers_spread: see SpinPolicy.
  WorkerPort(std::shared_ptr<SharedRegion> region, std::size_t num_workers,
             std::size_t worker_index, int spin_us = kSpinAdaptive,
             bool workers_spread = false);

  // Waits for the next job; {NONE, 0} when the deadline passes. Throws
  // std::logic_error if the previous job was not finish()ed.
  Job wait_job(const Deadline& deadline, const InterruptCheck& check);

  // Reports the current job as finished with `status`.
  void finish(JobStatus status, const InterruptCheck& check);

  bool has_job() const noexcept { return has_job_; }
  std::size_t worker_index() const noexcept { return index_; }
  std::size_t num_workers() const noexcept { return block_.num_workers(); }
  std::chrono::nanoseconds spin_budget() const noexcept {
    return spin_.budget();
  }
  bool spin_yields_only() const noexcept { return spin_.yields_only(); }

 private:
  bool try_take_job(Job& job);

  std::shared_ptr<SharedRegion> region_;  // keeps the mapping alive
  ControlBlock block_;
  std::size_t index_;
  SpinPolicy spin_;
  std::uint32_t spin_cap_us_;  // the slot's job_wait_spin_us spin_ follows
  std::uint32_t seen_seq_;     // last seq this port consumed (or skipped)
  std::uint32_t current_seq_ = 0;
  bool has_job_ = false;
  std::atomic<bool> busy_{false};
};

}  // namespace alf_env::penv
