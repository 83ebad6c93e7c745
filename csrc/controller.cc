#include "controller.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "busy_guard.h"
#include "protocol.h"
#include "region.h"
#include "syscall_error.h"

namespace alf_env::penv {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kJobNames[] = {"NONE", "STEP", "RESET", "CALL", "CLOSE"};

int pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) return static_cast<int>(fd);
  const int error = errno;
#else
  const int error = ENOSYS;
#endif
  throw_syscall_error(
      "pidfd_open", "pid " + std::to_string(pid), error,
      error == ESRCH    ? "No such process: did the worker already exit?"
      : error == ENOSYS ? "alf_env needs Linux >= 5.3 for crash detection."
                        : "");
}

}  // namespace

Controller::Controller(std::shared_ptr<SharedRegion> region,
                       std::size_t num_workers, int spin_us,
                       bool workers_spread)
    : region_(require_region(std::move(region), "Controller")),
      num_workers_(num_workers),
      block_(ControlBlock::initialize(*region_, num_workers)),
      spin_(spin_us, num_workers + 1, workers_spread),
      posted_seq_(num_workers, 0),
      outstanding_(num_workers, 0),
      finished_(num_workers, 0),
      pidfds_(num_workers),
      last_pid_poll_(Clock::now()) {
  batch_workers_.reserve(num_workers);  // post() then never allocates for it
}

void Controller::check_worker(std::int64_t worker, const char* who) const {
  if (worker < 0 || static_cast<std::size_t>(worker) >= num_workers_) {
    throw std::invalid_argument(std::string(who) + ": worker id " +
                                std::to_string(worker) +
                                " is out of range; expected 0 <= id < " +
                                std::to_string(num_workers_));
  }
}

void Controller::set_worker_pid(std::size_t worker, pid_t pid) {
  BusyGuard guard(busy_, "Controller.set_worker_pid");
  check_worker(static_cast<std::int64_t>(worker), "Controller.set_worker_pid");
  pidfds_[worker].reset(pid > 0 ? pidfd_open(pid) : -1);
}

void Controller::set_job_wait_spin_us(std::uint32_t cap_us) {
  if (cap_us > static_cast<std::uint32_t>(kMaxSpinUs)) {
    throw std::invalid_argument(
        "Controller.set_job_wait_spin_us: expected a cap in [0, " +
        std::to_string(kMaxSpinUs) + "] µs (0: the spin mode's own cap), got " +
        std::to_string(cap_us));
  }
  for (std::size_t w = 0; w < num_workers_; ++w) {
    // relaxed: a hint the worker reads at its next wait; it publishes no data.
    block_.slot(w).job_wait_spin_us.store(cap_us, std::memory_order_relaxed);
  }
}

std::uint32_t Controller::job_wait_spin_us() const noexcept {
  // relaxed: only this process writes it.
  return block_.slot(0).job_wait_spin_us.load(std::memory_order_relaxed);
}

void Controller::post(const std::vector<std::int64_t>& workers, JobType job,
                      std::int64_t arg) {
  BusyGuard guard(busy_, "Controller.post");
  const auto job_index = static_cast<std::uint32_t>(job);
  if (job == JobType::NONE || job_index > kMaxJobType) {
    throw std::invalid_argument(
        "Controller.post: expected JobType STEP, RESET, CALL or CLOSE, got " +
        std::string(job_index <= kMaxJobType ? kJobNames[job_index]
                                             : "an unknown value") +
        " (" + std::to_string(job_index) + ")");
  }
  // Check everything before posting anything.
  std::vector<std::uint8_t> listed(num_workers_, 0);
  for (std::int64_t worker : workers) {
    check_worker(worker, "Controller.post");
    if (listed[worker]) {
      throw std::invalid_argument("Controller.post: worker " +
                                  std::to_string(worker) +
                                  " is listed twice; list each worker once");
    }
    listed[worker] = 1;
    if (outstanding_[worker]) {
      throw std::invalid_argument(
          "Controller.post: worker " + std::to_string(worker) +
          " already has a job outstanding (posted, not yet returned by "
          "wait()); wait() for it first, or abandon() it if the worker died");
    }
  }
  // A lockstep batch starts with a STEP posted while nothing is outstanding;
  // any other post meanwhile makes it none (the workers overlap).
  batch_open_ = job == JobType::STEP && num_outstanding_ == 0 && !workers.empty();
  if (batch_open_) {
    batch_posted_ns_ = monotonic_ns();
    batch_workers_.assign(workers.begin(), workers.end());
  }
  for (std::int64_t worker : workers) {
    JobSlot& slot = block_.slot(worker);
    // relaxed: job_type and arg are published by the seq store below.
    slot.job_type.store(job_index, std::memory_order_relaxed);
    slot.arg.store(arg, std::memory_order_relaxed);
    const std::uint32_t seq = posted_seq_[worker] + 1;
    // seq_cst: a release (the worker's acquire load of seq then sees the
    // job and the action rows the caller wrote before post()) and the waker's
    // store (C) of the sleeping-flag handshake (futex.h).
    slot.seq.store(seq, std::memory_order_seq_cst);
    posted_seq_[worker] = seq;
    outstanding_[worker] = 1;
    ++num_outstanding_;
  }
  // Every job is published before the first wake, and a worker asleep on
  // this CPU is woken last: the kernel may hand it this CPU at once (wakeup
  // preemption), and the wakes still to come would wait for its whole job.
  for (std::int64_t worker : order_wakes(workers)) {
    JobSlot& slot = block_.slot(worker);
    wake_sleeper(slot.seq, slot.sleeping);  // (D) after every (C) above
  }
}

std::vector<std::int64_t> Controller::wake_order(
    const std::vector<std::int64_t>& workers) const {
  for (std::int64_t worker : workers) check_worker(worker, "Controller.wake_order");
  return order_wakes(workers);
}

std::vector<std::int64_t> Controller::order_wakes(
    const std::vector<std::int64_t>& workers) const {
  const int here = ::sched_getcpu();
  std::vector<std::int64_t> order(workers);
  if (here < 0) return order;
  // stable: the callers' order among the workers on other CPUs is kept.
  std::stable_partition(order.begin(), order.end(), [&](std::int64_t worker) {
    // relaxed: a hint (see JobSlot::sleep_cpu).
    return block_.slot(worker).sleep_cpu.load(std::memory_order_relaxed) !=
           static_cast<std::uint32_t>(here);
  });
  return order;
}

std::int64_t Controller::sleep_cpu(std::int64_t worker) const {
  check_worker(worker, "Controller.sleep_cpu");
  // relaxed: a hint (see JobSlot::sleep_cpu).
  const std::uint32_t cpu =
      block_.slot(worker).sleep_cpu.load(std::memory_order_relaxed);
  return cpu == kUnknownCpu ? -1 : static_cast<std::int64_t>(cpu);
}

void Controller::drain() {
  std::uint32_t id = 0;
  while (block_.queue().try_pop(queue_head_, id)) {
    if (id >= num_workers_) {
      throw std::runtime_error(
          "Controller: the finished queue holds worker id " +
          std::to_string(id) + " but there are only " +
          std::to_string(num_workers_) +
          " workers: the shared control block was overwritten (a worker "
          "wrote outside its rows?)");
    }
    // relaxed: ordered after the acquire in try_pop, which pairs with the
    // worker's release push that followed its done_seq store.
    const std::uint32_t done =
        block_.slot(id).done_seq.load(std::memory_order_relaxed);
    if (!outstanding_[id] || finished_[id] || done != posted_seq_[id]) {
      continue;  // a late completion of an abandoned job: drop it
    }
    finished_[id] = 1;
    pending_.push_back(static_cast<std::int32_t>(id));
  }
}

std::vector<std::int32_t> Controller::take(std::size_t k) {
  std::vector<std::int32_t> ids(pending_.begin(), pending_.begin() + k);
  pending_.erase(pending_.begin(), pending_.begin() + k);
  for (std::int32_t id : ids) {
    outstanding_[id] = 0;
    finished_[id] = 0;
  }
  num_outstanding_ -= k;
  return ids;
}

std::vector<std::int32_t> Controller::find_dead_workers() {
  last_pid_poll_ = Clock::now();
  std::vector<pollfd> fds;
  std::vector<std::int32_t> watched;
  for (std::size_t w = 0; w < num_workers_; ++w) {
    if (outstanding_[w] && !finished_[w] && pidfds_[w].valid()) {
      fds.push_back(pollfd{pidfds_[w].get(), POLLIN, 0});
      watched.push_back(static_cast<std::int32_t>(w));
    }
  }
  std::vector<std::int32_t> dead;
  if (fds.empty()) return dead;
  const int ready = ::poll(fds.data(), fds.size(), /*timeout_ms=*/0);
  if (ready < 0) {
    if (errno == EINTR) return dead;  // try again at the next poll
    throw_syscall_error("poll", std::to_string(fds.size()) + " pidfds", errno);
  }
  if (ready == 0) return dead;
  // A worker may have finished its job and then exited (e.g. after CLOSE):
  // collect completions first, and only report workers that did not finish.
  drain();
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0 &&
        !finished_[watched[i]]) {
      dead.push_back(watched[i]);
    }
  }
  return dead;
}

Controller::WaitResult Controller::run(const std::vector<std::int64_t>& workers,
                                       JobType job, std::int64_t arg,
                                       const Deadline& deadline,
                                       const InterruptCheck& check) {
  {
    // A second thread inside wait() is named as such, not as an outstanding job.
    BusyGuard guard(busy_, "Controller.run");
    if (num_outstanding_ != 0) {
      throw std::invalid_argument("Controller.run: expected no outstanding job, got " +
                                  std::to_string(num_outstanding_) +
                                  " (use post and wait)");
    }
  }
  post(workers, job, arg);
  return wait(workers.size(), deadline, check);
}

Controller::WaitResult Controller::wait(std::size_t k, const Deadline& deadline,
                                        const InterruptCheck& check) {
  BusyGuard guard(busy_, "Controller.wait");
  if (k > num_outstanding_) {
    throw std::invalid_argument(
        "Controller.wait: asked for k=" + std::to_string(k) +
        " completions, but only " + std::to_string(num_outstanding_) +
        " jobs are outstanding; post() more jobs or ask for fewer");
  }
  CompletionWord& completion = block_.completion();
  FinishedQueue& queue = block_.queue();
  drain();
  for (;;) {
    if (pending_.size() >= k) {
      WaitResult result{WaitStatus::OK, take(k)};
      if (batch_open_ && num_outstanding_ == 0) record_batch();
      return result;
    }
    if (Clock::now() - last_pid_poll_ >= kPidPollInterval) {
      std::vector<std::int32_t> dead = find_dead_workers();
      if (!dead.empty()) return {WaitStatus::WORKER_DIED, std::move(dead)};
      if (pending_.size() >= k) continue;
    }
    if (deadline.passed()) return {WaitStatus::TIMEOUT, {}};

    if (spin_.spin([&] { return queue.ready(queue_head_); },
                   deadline.remaining(kMaxSleepSlice))) {
      drain();
      continue;
    }
    // acquire: if this reads a worker's increment, that worker's push
    // happened-before, so the drain() below sees it. If drain() misses a
    // push, its increment comes after `seen` and sleep_on() will not sleep
    // through it (the handshake in futex.h).
    const std::uint32_t seen = completion.count.load(std::memory_order_acquire);
    drain();
    if (pending_.size() >= k) continue;
    const auto until_poll =
        kPidPollInterval - (Clock::now() - last_pid_poll_);
    const auto slice = std::min<std::chrono::nanoseconds>(
        deadline.remaining(kMaxSleepSlice),
        std::max<std::chrono::nanoseconds>(until_poll,
                                           std::chrono::nanoseconds(0)));
    if (slice.count() > 0) {
      // seq_cst: stored before sleep_on()'s (A), so a worker whose (D) sees
      // us sleeping also sees this threshold (futex.h, wake_sleeper_at).
      // Each completion adds one to count and at most one id to the queue.
      const auto needed = static_cast<std::uint32_t>(k - pending_.size());
      completion.wake_at.store(seen + needed, std::memory_order_seq_cst);
      const FutexWaitResult result =
          sleep_on(completion.count, seen, completion.sleeping, slice);
      if (result == FutexWaitResult::kTimedOut ||
          result == FutexWaitResult::kInterrupted) {
        if (check) check();  // may throw; pending_ keeps what we collected
      }
    }
    drain();
  }
}

JobStatus Controller::status(std::size_t worker) const {
  check_worker(static_cast<std::int64_t>(worker), "Controller.status");
  // relaxed: the worker stored it before its release push, which wait()
  // acquired before returning the worker.
  return static_cast<JobStatus>(
      block_.slot(worker).status.load(std::memory_order_relaxed));
}

bool Controller::outstanding(std::size_t worker) const {
  check_worker(static_cast<std::int64_t>(worker), "Controller.outstanding");
  return outstanding_[worker] != 0;
}

bool Controller::abandon(std::size_t worker) {
  BusyGuard guard(busy_, "Controller.abandon");
  check_worker(static_cast<std::int64_t>(worker), "Controller.abandon");
  if (!outstanding_[worker]) return false;
  batch_open_ = false;
  if (finished_[worker]) {
    pending_.erase(std::find(pending_.begin(), pending_.end(),
                             static_cast<std::int32_t>(worker)));
  }
  // Cancel the job in the slot with a NONE "job" so that a process attaching
  // to this slot later does not pick up the abandoned job; workers skip NONE.
  JobSlot& slot = block_.slot(worker);
  // relaxed: published by the seq store below.
  slot.job_type.store(static_cast<std::uint32_t>(JobType::NONE),
                      std::memory_order_relaxed);
  slot.arg.store(0, std::memory_order_relaxed);
  const std::uint32_t seq = posted_seq_[worker] + 1;
  // seq_cst: as in post() (release + handshake).
  slot.seq.store(seq, std::memory_order_seq_cst);
  posted_seq_[worker] = seq;
  outstanding_[worker] = 0;
  finished_[worker] = 0;
  --num_outstanding_;
  wake_sleeper(slot.seq, slot.sleeping);
  return true;
}

void Controller::record_batch() {
  batch_open_ = false;
  const std::uint64_t now = monotonic_ns();
  std::uint64_t first = ~std::uint64_t{0};
  std::uint64_t last = 0;
  std::uint64_t slowest = 0;
  for (std::int64_t worker : batch_workers_) {
    const JobSlot& slot = block_.slot(worker);
    // relaxed (both): the worker stored them before its release push, which
    // drain() acquired before wait() returned the worker.
    const std::uint64_t start = slot.start_ns.load(std::memory_order_relaxed);
    const std::uint64_t finish = slot.finish_ns.load(std::memory_order_relaxed);
    first = std::min(first, finish);
    last = std::max(last, finish);
    if (finish > start) slowest = std::max(slowest, finish - start);
  }
  const std::uint64_t wait = now > batch_posted_ns_ ? now - batch_posted_ns_ : 0;
  const std::uint64_t figures[BatchTimings::kFigures] = {
      wait, last - first, wait > slowest ? wait - slowest : 0};
  ++timings_.count;
  for (std::size_t i = 0; i < BatchTimings::kFigures; ++i) {
    timings_.sum_ns[i] += figures[i];
    ++timings_.buckets[i][timing_bucket(figures[i])];
  }
}

BatchTimings Controller::take_timings() {
  BusyGuard guard(busy_, "Controller.take_timings");
  BatchTimings taken = timings_;
  timings_ = BatchTimings{};
  return taken;
}

}  // namespace alf_env::penv
