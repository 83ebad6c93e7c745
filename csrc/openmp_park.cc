#include "openmp_park.h"

#include <dlfcn.h>
#include <sched.h>

#include <climits>
#include <stdexcept>

#include "futex.h"

namespace alf_env::penv {

namespace {

std::string loader_error() {
  const char* text = dlerror();
  return text ? text : "no message";
}

}  // namespace

OpenMpPark::OpenMpPark(const std::string& runtime_path) {
  // RTLD_NOLOAD: bind to the copy torch loaded (a second copy would have a
  // pool of its own), and never load one.
  handle_ = dlopen(runtime_path.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  if (handle_ == nullptr) {
    throw std::runtime_error("OpenMP runtime " + runtime_path +
                             " is not loaded in this process: " + loader_error());
  }
  start_ = reinterpret_cast<StartFn>(dlsym(handle_, "GOMP_parallel_start"));
  end_ = reinterpret_cast<EndFn>(dlsym(handle_, "GOMP_parallel_end"));
  if (start_ == nullptr || end_ == nullptr) {
    const std::string why = loader_error();
    dlclose(handle_);
    throw std::runtime_error("OpenMP runtime " + runtime_path +
                             " has no GOMP_parallel_start/GOMP_parallel_end: " + why);
  }
}

OpenMpPark::~OpenMpPark() {
  if (parked_ && pthread_equal(owner_, pthread_self())) {
    end();
  } else if (parked_) {
    // Another thread cannot close the region; at least let the team run.
    release_.store(1, std::memory_order_release);
    futex_wake(release_, INT_MAX);
  }
  dlclose(handle_);
}

void OpenMpPark::park_team_thread(void* word) noexcept {
  auto& release = *static_cast<std::atomic<std::uint32_t>*>(word);
  // acquire: pairs with end()'s release store (nothing is published through
  // the word, but the team must not leave before end() says so).
  while (release.load(std::memory_order_acquire) == 0) {
    try {
      futex_wait(release, 0, std::nullopt);
    } catch (...) {
      // EFAULT/EINVAL cannot happen for this word; if the futex is refused
      // anyway, keep the thread off the core by yielding instead.
      sched_yield();
    }
  }
}

void OpenMpPark::begin() {
  if (parked_) return;
  // relaxed: no team thread of this region exists yet; GOMP_parallel_start's
  // own synchronization publishes the store to the threads it starts.
  release_.store(0, std::memory_order_relaxed);
  start_(&OpenMpPark::park_team_thread, &release_, 0);
  owner_ = pthread_self();
  parked_ = true;
}

void OpenMpPark::end() {
  if (!parked_) return;
  if (!pthread_equal(owner_, pthread_self())) {
    throw std::logic_error("OpenMpPark.end() called on another thread than begin()");
  }
  release_.store(1, std::memory_order_release);
  futex_wake(release_, INT_MAX);
  end_();  // joins the team at the region's closing barrier
  parked_ = false;
}

}  // namespace alf_env::penv
