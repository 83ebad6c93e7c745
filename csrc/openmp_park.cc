#include "openmp_park.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <limits>
#include <stdexcept>

#include "futex.h"

namespace alf_env::penv {

namespace {

template <typename F>
F symbol(void* handle, const char* name, const std::string& path) {
  ::dlerror();  // clear
  void* found = ::dlsym(handle, name);
  if (found == nullptr) {
    const char* error = ::dlerror();
    throw std::runtime_error("OpenMpPark: " + path + " has no " + name + ": " +
                             (error != nullptr ? error : "null symbol"));
  }
  return reinterpret_cast<F>(found);
}

}  // namespace

OpenMpPark::OpenMpPark(const std::string& runtime_path) {
  handle_ = ::dlopen(runtime_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle_ == nullptr) {
    const char* error = ::dlerror();
    throw std::runtime_error("OpenMpPark: the OpenMP runtime " + runtime_path +
                             " is not loaded: " + (error != nullptr ? error : "?"));
  }
  try {
    parallel_start_ = symbol<decltype(parallel_start_)>(handle_, "GOMP_parallel_start",
                                                         runtime_path);
    parallel_end_ = symbol<decltype(parallel_end_)>(handle_, "GOMP_parallel_end",
                                                    runtime_path);
    max_threads_ = symbol<decltype(max_threads_)>(handle_, "omp_get_max_threads",
                                                  runtime_path);
    in_parallel_ = symbol<decltype(in_parallel_)>(handle_, "omp_in_parallel",
                                                  runtime_path);
    thread_num_ = symbol<decltype(thread_num_)>(handle_, "omp_get_thread_num",
                                                runtime_path);
  } catch (...) {
    ::dlclose(handle_);
    throw;
  }
}

OpenMpPark::~OpenMpPark() {
  try {
    release();
  } catch (...) {
    // A failed FUTEX_WAKE: the parked threads stay asleep, nothing to undo.
  }
  // Drops the reference dlopen took; the runtime stays loaded by its owner.
  ::dlclose(handle_);
}

void OpenMpPark::parked_thread(void* self) {
  auto* park = static_cast<OpenMpPark*>(self);
  const int index = park->thread_num_();
  if (index > 0 && static_cast<std::size_t>(index) < park->tids_.size()) {
    park->tids_[index] = static_cast<pid_t>(::syscall(SYS_gettid));
  }
  // acquire: pairs with release()'s fetch_add; nothing else is read through it.
  while (park->word_.load(std::memory_order_acquire) == park->generation_) {
    try {
      futex_wait(park->word_, park->generation_, std::nullopt);
    } catch (...) {
      // No exception may leave an OpenMP region: an unexpected futex error
      // ends the nap, and the thread waits at the region's barrier instead.
      return;
    }
  }
}

bool OpenMpPark::park() {
  const int threads = max_threads_();
  if (parked_ || threads <= 1 || in_parallel_() != 0) return false;
  tids_.assign(static_cast<std::size_t>(threads), 0);
  // relaxed: only this thread writes the word; the pool threads start after
  // parallel_start_, which orders this read before their loads.
  generation_ = word_.load(std::memory_order_relaxed);
  // 0: the pool's default size (omp_get_max_threads()). The calling thread
  // does not run parked_thread: it returns to post and wait for the step.
  parallel_start_(&OpenMpPark::parked_thread, this, 0);
  parked_ = true;
  return true;
}

void OpenMpPark::release() {
  if (!parked_) return;
  // release: the parked threads' acquire load sees the new value and leaves.
  word_.fetch_add(1, std::memory_order_release);
  futex_wake(word_, std::numeric_limits<int>::max());
  parallel_end_();
  parked_ = false;
}

std::int64_t OpenMpPark::pool_cpu_ns() const {
  if (parked_ || tids_.size() < 2) return -1;
  std::int64_t total = 0;
  for (std::size_t i = 1; i < tids_.size(); ++i) {
    if (tids_[i] == 0) return -1;
    // The kernel's per-thread CPU clock id (MAKE_THREAD_CPUCLOCK(tid,
    // CPUCLOCK_SCHED), as glibc's pthread_getcpuclockid builds it).
    const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tids_[i]) << 3) | 6);
    timespec now{};
    if (::clock_gettime(clock, &now) != 0) return -1;  // the thread has ended
    total += static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  }
  return total;
}

std::vector<pid_t> OpenMpPark::pool_tids() const {
  if (tids_.size() < 2) return {};
  std::vector<pid_t> tids(tids_.begin() + 1, tids_.end());
  for (const pid_t tid : tids) {
    if (tid == 0) return {};  // parked before this thread had run parked_thread
  }
  return tids;
}

}  // namespace alf_env::penv
