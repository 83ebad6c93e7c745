// BusyGuard: fails loudly when two threads use one single-threaded object.
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>

namespace alf_env::penv {

// Controller and WorkerPort keep process-local state without locks (their
// blocking calls release the GIL, so two Python threads could enter at once).
// Instead of a mutex, which would turn misuse into a deadlock (one thread
// waiting for a job that another thread cannot post), they refuse to be
// entered twice.
class BusyGuard {
 public:
  BusyGuard(std::atomic<bool>& busy, const char* what) : busy_(busy) {
    // acquire: like taking a lock - we see everything the previous user of
    // the object did before it released the flag.
    if (busy_.exchange(true, std::memory_order_acquire)) {
      throw std::runtime_error(
          std::string(what) + ": another thread is using this object right "
          "now; it is not thread-safe. Use it from one thread only (or guard "
          "it with a lock).");
    }
  }
  // release: publishes this call's changes to the next user.
  ~BusyGuard() { busy_.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

}  // namespace alf_env::penv
