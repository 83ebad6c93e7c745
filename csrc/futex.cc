#include "futex.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "protocol.h"
#include "syscall_error.h"

namespace alf_env::penv {
namespace {

std::uint32_t* futex_address(std::atomic<std::uint32_t>& word) {
  // std::atomic<uint32_t> is a plain lock-free 32-bit word (static_assert in
  // futex.h), which is what the kernel reads.
  return reinterpret_cast<std::uint32_t*>(&word);
}

timespec to_timespec(std::chrono::nanoseconds duration) {
  const auto ns = std::max<std::int64_t>(duration.count(), 0);
  constexpr std::int64_t kNsPerSecond = 1'000'000'000;
  timespec result{};
  result.tv_sec = static_cast<time_t>(ns / kNsPerSecond);
  result.tv_nsec = static_cast<long>(ns % kNsPerSecond);
  return result;
}

}  // namespace

FutexWaitResult futex_wait(std::atomic<std::uint32_t>& word,
                           std::uint32_t expected,
                           std::optional<std::chrono::nanoseconds> timeout) {
  timespec relative{};
  const timespec* timeout_ptr = nullptr;
  if (timeout) {
    relative = to_timespec(*timeout);
    timeout_ptr = &relative;
  }
  // FUTEX_WAIT (not FUTEX_WAIT_PRIVATE): the word is shared between processes.
  const long rc = ::syscall(SYS_futex, futex_address(word), FUTEX_WAIT,
                            expected, timeout_ptr, nullptr, 0);
  if (rc == 0) return FutexWaitResult::kWoken;
  const int error = errno;
  switch (error) {
    case EAGAIN:
      return FutexWaitResult::kValueChanged;
    case ETIMEDOUT:
      return FutexWaitResult::kTimedOut;
    case EINTR:
      return FutexWaitResult::kInterrupted;
    default:
      throw_syscall_error("futex", "FUTEX_WAIT", error,
                          error == ENOSYS ? "This kernel has no futex support."
                                          : "");
  }
}

int futex_wake(std::atomic<std::uint32_t>& word, int max_waiters) {
  const long rc = ::syscall(SYS_futex, futex_address(word), FUTEX_WAKE,
                            max_waiters, nullptr, nullptr, 0);
  if (rc < 0) throw_syscall_error("futex", "FUTEX_WAKE", errno);
  return static_cast<int>(rc);
}

FutexWaitResult sleep_on(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                         std::atomic<std::uint32_t>& sleeping,
                         std::optional<std::chrono::nanoseconds> timeout) {
  // (A) seq_cst: must be ordered before the re-check (B) in the single total
  // order shared with the waker's (C) and (D); see futex.h.
  sleeping.store(kSleeping, std::memory_order_seq_cst);
  FutexWaitResult result = FutexWaitResult::kValueChanged;
  // (B) seq_cst: the other half of the store->load pair of the sleeper.
  if (word.load(std::memory_order_seq_cst) == seen) {
    result = futex_wait(word, seen, timeout);
  }
  // relaxed: we are awake. A waker that still reads kSleeping only costs one
  // spurious FUTEX_WAKE; before sleeping again we re-announce with (A).
  sleeping.store(kAwake, std::memory_order_relaxed);
  return result;
}

void wake_sleeper(std::atomic<std::uint32_t>& word,
                  std::atomic<std::uint32_t>& sleeping) {
  // (D) seq_cst: pairs with the sleeper's (A)/(B); the caller's change of the
  // word (C) was seq_cst too, so either we see kSleeping or the sleeper sees
  // the new word value.
  if (sleeping.load(std::memory_order_seq_cst) == kSleeping) {
    futex_wake(word, 1);
  }
}

void wake_sleeper_at(std::atomic<std::uint32_t>& word,
                     std::atomic<std::uint32_t>& sleeping,
                     const std::atomic<std::uint32_t>& wake_at,
                     std::uint32_t reached) {
  // (D) seq_cst, as in wake_sleeper().
  if (sleeping.load(std::memory_order_seq_cst) != kSleeping) return;
  // seq_cst: ordered after (D), so it sees the threshold stored before (A).
  const std::uint32_t target = wake_at.load(std::memory_order_seq_cst);
  // Wrap-around safe "reached >= target" on a 32-bit counter.
  if (static_cast<std::int32_t>(reached - target) < 0) return;
  futex_wake(word, 1);
}

int usable_cpu_count() {
  // sched_getaffinity with a buffer large enough for any machine we may see.
  constexpr int kMaxCpus = 8192;
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  if (set != nullptr) {
    const std::size_t set_size = CPU_ALLOC_SIZE(kMaxCpus);
    int count = 0;
    if (::sched_getaffinity(0, set_size, set) == 0) count = CPU_COUNT_S(set_size, set);
    CPU_FREE(set);
    if (count > 0) return count;
  }
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

SpinPolicy::SpinPolicy(int spin_us, std::size_t num_processes,
                       bool workers_spread,
                       std::chrono::nanoseconds adaptive_cap)
    : pause_rounds_(num_processes > static_cast<std::size_t>(usable_cpu_count())
                        ? 0  // oversubscribed: yield from the first round
                        : kPauseRounds),
      mode_cap_ns_(pause_rounds_ != 0 ? kAdaptiveMaxSpin.count()
                   : workers_spread   ? kAdaptiveMaxSpreadSpin.count()
                                      : kAdaptiveMaxYieldSpin.count()),
      max_budget_ns_(adaptive_cap.count() > 0 ? adaptive_cap.count()
                                              : mode_cap_ns_) {
  if (spin_us < kSpinAdaptive || spin_us > kMaxSpinUs) {
    throw std::invalid_argument(
        "spin_us must be -1 (adaptive), 0 (never spin) or a number of "
        "microseconds in [1, " + std::to_string(kMaxSpinUs) + "], got " +
        std::to_string(spin_us));
  }
  if (spin_us == kSpinNever) {
    mode_ = Mode::kNever;
    budget_ns_ = 0;
  } else if (spin_us > 0) {
    mode_ = Mode::kFixed;
    budget_ns_ = std::chrono::nanoseconds(std::chrono::microseconds(spin_us))
                     .count();
  } else {
    mode_ = Mode::kAdaptive;
    budget_ns_ = max_budget_ns_;
  }
}

void SpinPolicy::set_cap(std::chrono::nanoseconds cap) {
  if (mode_ != Mode::kAdaptive) return;
  max_budget_ns_ = cap.count() > 0 ? cap.count() : mode_cap_ns_;
  // Start from the new cap, as a fresh policy would: a budget that shrank
  // under the old cap would hide what the new one does.
  budget_ns_ = max_budget_ns_;
  waits_since_probe_ = 0;
}

std::int64_t SpinPolicy::next_budget_ns() {
  if (mode_ == Mode::kAdaptive && budget_ns_ == 0) {
    // Sleeping at once; probe once in a while whether spinning pays again.
    if (++waits_since_probe_ >= kAdaptiveProbePeriod) {
      waits_since_probe_ = 0;
      return max_budget_ns_;
    }
  }
  return budget_ns_;
}

void SpinPolicy::record(bool success, std::int64_t spun_ns, bool truncated) {
  if (mode_ != Mode::kAdaptive) return;
  if (success) {
    budget_ns_ = std::clamp<std::int64_t>(std::max(budget_ns_, 2 * spun_ns),
                                          kAdaptiveMinSpin.count(),
                                          max_budget_ns_);
  } else if (!truncated) {
    // A spin cut short by the caller's timeout says nothing about the policy.
    budget_ns_ /= 2;
    if (budget_ns_ < kAdaptiveMinSpin.count()) budget_ns_ = 0;
  }
}

void SpinPolicy::record_wait(std::int64_t waited_ns) {
  // As a spin of that length that succeeded (record() leaves fixed budgets be).
  if (waited_ns <= max_budget_ns_) record(true, waited_ns, false);
}

Deadline Deadline::after(std::optional<double> timeout_s, const char* who) {
  Deadline deadline;
  if (!timeout_s || std::isinf(*timeout_s)) {
    if (timeout_s && *timeout_s < 0) {
      throw std::invalid_argument(std::string(who) +
                                  ": timeout_s must be >= 0 or None, got -inf");
    }
    return deadline;
  }
  if (std::isnan(*timeout_s) || *timeout_s < 0) {
    throw std::invalid_argument(std::string(who) +
                                ": timeout_s must be >= 0 (seconds) or None "
                                "(no limit), got " +
                                std::to_string(*timeout_s));
  }
  // Timeouts beyond ~292 years would overflow nanoseconds: treat as no limit.
  constexpr double kMaxSeconds = 1e9;
  if (*timeout_s >= kMaxSeconds) return deadline;
  deadline.at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(*timeout_s));
  return deadline;
}

std::chrono::nanoseconds Deadline::remaining(std::chrono::nanoseconds cap) const {
  if (!at_) return cap;
  const auto left = *at_ - Clock::now();
  if (left <= Clock::duration::zero()) return std::chrono::nanoseconds(0);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(left);
}

bool Deadline::passed() const { return at_ && Clock::now() >= *at_; }

}  // namespace alf_env::penv
