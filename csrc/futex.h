// Cross-process futex wait/wake, the sleeping-flag handshake, and the
// spin-then-sleep policy used by every waiter of alf_env._penv.
//
// Futexes
// -------
// futex_wait()/futex_wake() operate on a std::atomic<uint32_t> that lives in
// a MAP_SHARED mapping. They do NOT use FUTEX_PRIVATE_FLAG: the kernel keys a
// shared futex by (file, offset), so processes that map the region at
// different addresses still meet on the same word.
//
// Sleeping flags (no lost wakes, no useless syscalls)
// --------------------------------------------------
// Each futex word has exactly one potential sleeper, which owns a "sleeping"
// flag next to the word. The sleeper (sleep_on):
//     sleeping.store(kSleeping, seq_cst);   (A)
//     if (word.load(seq_cst) != seen) skip; (B)
//     futex_wait(word, seen);               (kernel re-checks word == seen)
// The waker, after changing the word with a seq_cst operation (C), calls
// wake_sleeper():
//     if (sleeping.load(seq_cst) == kSleeping) futex_wake(word);   (D)
// This is Dekker's pattern: all four operations are seq_cst, so they appear in
// one total order. If D reads kAwake, D precedes A, hence C precedes B and the
// sleeper sees the new value and does not sleep. If D reads kSleeping, the
// waker issues FUTEX_WAKE; a sleeper that has not yet reached the kernel
// fails the kernel's own word == seen check (EAGAIN). Either way no wake is
// lost. Release/acquire alone would not do: it allows both loads to read the
// old values (store->load reordering, which x86 performs too).
//
// Spin-then-sleep policy (SpinPolicy)
// -----------------------------------
// Before sleeping, a waiter may spin, re-checking the condition each round,
// until the spin budget is used up; then it sleeps on the futex. A round is
// either the CPU's pause instruction (cheap, keeps the core) or
// sched_yield() (gives the core to any other runnable thread on it first).
// `spin_us` chooses the budget:
//   * 0: never spin; always sleep right away (lowest CPU use).
//   * > 0: a fixed budget of spin_us microseconds (at most kMaxSpinUs).
//   * -1 (kSpinAdaptive, the default): the budget starts at its cap
//     (kAdaptiveMaxSpin, or one of the yield-only caps below) and adapts: a spin that succeeds after t ns raises the budget to
//     max(budget, 2t) (capped); a spin that fails (the waiter had to sleep
//     anyway) halves it; below kAdaptiveMinSpin it becomes 0 (sleep at once).
//     With a zero budget, every kAdaptiveProbePeriod-th wait probes once with
//     the full budget so the waiter notices when spinning starts paying off.
//     So waits much longer than the cap soon sleep at once, and short ones
//     spin. A worker waiting for its next job also sets the budget from a
//     wait that slept but ended within the cap (record_wait: twice that
//     wait): its waits mix short ones with a long one now and then (a
//     straggler, a reset), and the halving alone let one long wait drag the
//     budget under the short ones, each of which then failed and halved it
//     again, down to sleeping at once (HalfCheetah, 8 envs on 2 workers:
//     a hand-off of ~22 us at p50 instead of ~5 us, the wake-up of an idle
//     vCPU). The main process's wait keeps the halving alone.
// Pausing vs yielding: with no more processes taking part (num_workers + 1)
// than usable CPUs, a waiter pauses for kPauseRounds rounds, then yields.
// When they outnumber the CPUs, a waiter only yields: every round hands the
// core to a runnable worker (or the main process) if there is one, so the
// spinner takes no CPU that another process could use, and it keeps the
// core from going idle -- on a VM, waking an idle vCPU costs 20-30 us, more
// than a whole trivial env step. (Measured on 2 vCPUs, 8 one-env workers:
// 50k env-steps/s sleeping at once, ~100k with yield-spinning.)
// The cap when only yielding is kAdaptiveMaxYieldSpin (2 ms). A runnable
// spinner counts as load for the kernel's balancer, which then may leave
// three busy workers on one core and one on the other (4 workers + a
// spinning main process = 5 runnable tasks, "balanced" 3 / 2), so waits as
// long as a lockstep step of CPU-bound envs should end in sleep. When the
// caller says the workers are spread over the CPUs (`workers_spread`: pinned
// one per CPU, or at least one per CPU in lockstep, worker_cpus in the Python
// API), the cap is kAdaptiveMaxSpreadSpin (5 ms) for the main process: it
// spins through a ~2 ms step (4 envs of ~1 ms on 2 cores), worth ~5% there
// with pinned workers. Workers so spread but placed by the OS need it too:
// HalfCheetah, 8 envs on 2 workers, a torch policy in the loop, ran at 0.68x
// (6 paired runs) with the 2 ms cap. A worker waiting
// for its next job is capped at kAdaptiveMaxJobWaitSpin (50 µs) in every mode
// (see there) until the main process sets another cap in the job slot.
//   The budget never exceeds the caller's remaining timeout.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace alf_env::penv {

static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "futex words must be plain lock-free 32-bit atomics");

// ---------------------------------------------------------------- futexes --

enum class FutexWaitResult {
  kWoken,         // FUTEX_WAKE (or a spurious wake-up): re-check the word
  kValueChanged,  // the word no longer held `expected` (EAGAIN)
  kTimedOut,      // the timeout passed (ETIMEDOUT)
  kInterrupted,   // a signal handler ran (EINTR)
};

// Sleeps while `word` == `expected`, at most `timeout` (nullopt: no limit).
// Throws SyscallError for unexpected errors (EFAULT, EINVAL, ENOSYS).
FutexWaitResult futex_wait(std::atomic<std::uint32_t>& word,
                           std::uint32_t expected,
                           std::optional<std::chrono::nanoseconds> timeout);

// Wakes at most `max_waiters` processes sleeping on `word`; returns how many.
int futex_wake(std::atomic<std::uint32_t>& word, int max_waiters);

// The sleeper's half of the handshake described above: announces itself in
// `sleeping`, re-checks `word` against `seen` and sleeps at most `timeout`.
FutexWaitResult sleep_on(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                         std::atomic<std::uint32_t>& sleeping,
                         std::optional<std::chrono::nanoseconds> timeout);

// The waker's half: call after changing `word` with a seq_cst operation.
// Issues FUTEX_WAKE only if the sleeper announced itself.
void wake_sleeper(std::atomic<std::uint32_t>& word,
                  std::atomic<std::uint32_t>& sleeping);

// Like wake_sleeper() for a counter `word` whose sleeper only needs waking
// once the counter reaches `wake_at` (stored by the sleeper, seq_cst, before
// its (A)). `reached` is the counter's value after the waker's increment (C).
// If (D) reads kSleeping, the later seq_cst load of `wake_at` sees the
// threshold of that sleep (or a newer one), so the increment that reaches it
// always wakes; increments short of it skip the syscall and the sleeper keeps
// sleeping (the kernel does not re-check the word after it has slept).
void wake_sleeper_at(std::atomic<std::uint32_t>& word,
                     std::atomic<std::uint32_t>& sleeping,
                     const std::atomic<std::uint32_t>& wake_at,
                     std::uint32_t reached);

// --------------------------------------------------------------- spinning --

// Tells the CPU we are in a spin loop (x86 `pause`, arm64 `yield`).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#endif
}

// The number of CPUs this process may run on (sched_getaffinity), >= 1.
int usable_cpu_count();

inline constexpr int kSpinAdaptive = -1;
inline constexpr int kSpinNever = 0;
inline constexpr int kMaxSpinUs = 1'000'000;
inline constexpr std::chrono::nanoseconds kAdaptiveMaxSpin =
    std::chrono::microseconds(100);
inline constexpr std::chrono::nanoseconds kAdaptiveMaxYieldSpin =
    std::chrono::microseconds(2000);
inline constexpr std::chrono::nanoseconds kAdaptiveMaxSpreadSpin =
    std::chrono::microseconds(5000);
inline constexpr std::chrono::nanoseconds kAdaptiveMinSpin =
    std::chrono::microseconds(2);
// The cap of a worker waiting for its next job (WorkerPort), whatever the
// mode. That wait is the trainer's own time between steps: a few µs of Python
// in a benchmark loop, a policy's forward pass (100 µs and more) in a training
// loop. Spinning through the latter, even yielding, takes cores that the
// trainer's threads need: CartPole, 8 envs on 2 workers, a torch MLP forward
// in the loop on 2 CPUs: 14.6k env-steps/s with the workers spinning up to
// the 5 ms spread cap, 31.4k with them sleeping at once. So a worker spins at
// most a few wake-ups' worth and sleeps through anything longer.
inline constexpr std::chrono::nanoseconds kAdaptiveMaxJobWaitSpin =
    std::chrono::microseconds(50);
// The value of JobSlot::job_wait_spin_us that means "the mode's own cap"
// (kAdaptiveMaxSpin, kAdaptiveMaxYieldSpin or kAdaptiveMaxSpreadSpin): when
// the trainer's time between steps is short, as in a loop of env steps
// alone, a worker that spins through it answers the next step without a
// wake-up. The front ends keep the 50 µs cap: docs/benchmarks.md, "Settings
// and the rows behind them", has the rows of both.
inline constexpr std::uint32_t kJobWaitSpinModeCap = 0;
inline constexpr std::uint32_t kAdaptiveProbePeriod = 64;
// Rounds of `pause` before switching to sched_yield(); the clock is read
// every kClockCheckPeriod pause rounds and after every sched_yield().
inline constexpr std::uint32_t kPauseRounds = 64;
inline constexpr std::uint32_t kClockCheckPeriod = 16;

// Decides how long a waiter spins before it sleeps (see the header comment).
// Process-local state; not thread-safe (each waiter owns one).
class SpinPolicy {
 public:
  // spin_us: kSpinAdaptive (-1), kSpinNever (0) or a fixed budget in µs.
  // num_processes: processes that share the work (num_workers + 1).
  // workers_spread: the workers are spread over the CPUs (see the header
  // comment).
  // adaptive_cap: if positive, the adaptive budget's cap instead of the
  // mode's (WorkerPort: kAdaptiveMaxJobWaitSpin).
  SpinPolicy(int spin_us, std::size_t num_processes,
             bool workers_spread = false,
             std::chrono::nanoseconds adaptive_cap = std::chrono::nanoseconds(0));

  // Spins until `ready()` returns true (-> true) or the budget, capped at
  // `limit`, is used up (-> false). Adapts the budget in adaptive mode.
  template <typename Ready>
  bool spin(Ready&& ready, std::chrono::nanoseconds limit);

  // Whether every spin round yields the core (more processes than CPUs).
  bool yields_only() const noexcept { return pause_rounds_ == 0; }

  // Replaces the adaptive budget's cap (0: the mode's own cap) and restarts
  // the budget at it. No effect unless the policy is adaptive.
  void set_cap(std::chrono::nanoseconds cap);

  // After a wait that slept (see the header comment): a whole wait within the
  // cap raises the budget to twice it, as a spin that succeeded would have.
  void record_wait(std::int64_t waited_ns);

  // The current budget (0 when the waiter sleeps at once).
  std::chrono::nanoseconds budget() const noexcept {
    return std::chrono::nanoseconds(budget_ns_);
  }

 private:
  enum class Mode { kNever, kFixed, kAdaptive };

  std::int64_t next_budget_ns();
  void record(bool success, std::int64_t spun_ns, bool truncated);

  Mode mode_;
  std::int64_t budget_ns_;
  // Pause rounds before yielding: kPauseRounds, or 0 when oversubscribed.
  std::uint32_t pause_rounds_;
  // The mode's cap: kAdaptiveMaxSpin, or when only yielding
  // kAdaptiveMaxYieldSpin (kAdaptiveMaxSpreadSpin with spread workers).
  std::int64_t mode_cap_ns_;
  // The adaptive budget's cap: the caller's adaptive_cap, or mode_cap_ns_.
  std::int64_t max_budget_ns_;
  std::uint32_t waits_since_probe_ = 0;
};

template <typename Ready>
bool SpinPolicy::spin(Ready&& ready, std::chrono::nanoseconds limit) {
  using Clock = std::chrono::steady_clock;
  const std::int64_t planned = next_budget_ns();
  const std::int64_t budget = std::min<std::int64_t>(planned, limit.count());
  if (budget <= 0) return false;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::nanoseconds(budget);
  for (std::uint32_t round = 0;; ++round) {
    if (ready()) {
      record(true, (Clock::now() - start).count(), false);
      return true;
    }
    if (round < pause_rounds_) {
      cpu_relax();
      if (round % kClockCheckPeriod != 0) continue;
    } else {
      // Someone else on this core may be the one we are waiting for (or
      // need the core more than we do).
      ::sched_yield();
    }
    if (Clock::now() >= deadline) break;
  }
  record(false, budget, budget < planned);
  return false;
}

// --------------------------------------------------------------- timeouts --

// A wait's time limit. nullopt means "no limit".
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  // timeout_s: nullopt or +inf (no limit), or a finite number >= 0.
  // Throws std::invalid_argument for negative or NaN values.
  static Deadline after(std::optional<double> timeout_s, const char* who);

  bool unlimited() const noexcept { return !at_.has_value(); }
  // Time left (0 when passed); `cap` for an unlimited deadline.
  std::chrono::nanoseconds remaining(std::chrono::nanoseconds cap) const;
  bool passed() const;

 private:
  std::optional<Clock::time_point> at_;
};

// Called (without the GIL) after each sleep slice and after EINTR; may throw
// to abort the wait (the bindings raise pending Python signals, e.g. Ctrl-C).
using InterruptCheck = std::function<void()>;

}  // namespace alf_env::penv
