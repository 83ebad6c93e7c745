// OpenMpPark: the trainer's OpenMP pool threads asleep while a lockstep step runs.
//
// After each parallel region, the threads of an OpenMP pool (libgomp, which
// torch's CPU kernels run on) spin for milliseconds in case another region
// follows (8.3 ms on the project's 2-CPU machine). In a training loop the
// batched env step follows the policy's forward pass, so a spinning pool
// thread holds a core that a worker needs for the step.
//
// park() opens a parallel region of the calling thread's pool in which every
// pool thread sleeps on a futex; release() wakes them and closes the region.
// The pool's threads are neither ended nor created: releasing the pool
// instead (omp_pause_resource_all) made the next forward pass create a
// thread on the trainer's own core, where it and the trainer's thread, each
// spinning at the region's barrier for the other, took turns for ~5
// scheduler ticks per step (docs/benchmarks.md, "The trainer's torch threads").
//
// The runtime is the one already loaded from `runtime_path` (dlopen with
// RTLD_NOLOAD: nothing is loaded). Its old-ABI entry points
// GOMP_parallel_start / GOMP_parallel_end let the region stay open while the
// calling thread returns to its caller (Python) to post and wait for the
// step; a torch op it runs meanwhile runs on one thread (omp_in_parallel()).
//
// Not thread-safe: one OpenMpPark per calling thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace alf_env::penv {

class OpenMpPark {
 public:
  // Binds to the OpenMP runtime loaded from `runtime_path`. Throws
  // std::runtime_error naming the path and dlerror() if it is not loaded or
  // lacks an entry point.
  explicit OpenMpPark(const std::string& runtime_path);
  ~OpenMpPark();
  OpenMpPark(const OpenMpPark&) = delete;
  OpenMpPark& operator=(const OpenMpPark&) = delete;

  // Opens the region with every pool thread asleep; returns whether it did
  // (false: the calling thread's pool has one thread, the caller is inside a
  // region, or the pool is parked already).
  bool park();
  // Wakes the parked threads and closes the region (waiting at its barrier
  // for them to arrive). Nothing if not parked.
  void release();
  bool parked() const noexcept { return parked_; }
  // CPU time (ns) of the pool's threads that the last park() put to sleep,
  // read from their thread CPU clocks (exact, also for a thread running on
  // another CPU); -1 before any park() or once one of them has ended (the
  // pool was resized or released).
  std::int64_t pool_cpu_ns() const;
  // The thread ids of the pool threads the last park() put to sleep (the
  // calling thread's excluded); empty before every one of them has parked
  // once. The trainer reads their scheduler statistics from /proc with them.
  std::vector<pid_t> pool_tids() const;

 private:
  static void parked_thread(void* self);

  void* handle_ = nullptr;
  void (*parallel_start_)(void (*)(void*), void*, unsigned) = nullptr;
  void (*parallel_end_)() = nullptr;
  int (*max_threads_)() = nullptr;
  int (*in_parallel_)() = nullptr;
  // Bumped by release(): the parked threads sleep while it holds the value
  // park() read into `generation_`.
  std::atomic<std::uint32_t> word_{0};
  std::uint32_t generation_ = 0;
  bool parked_ = false;
  int (*thread_num_)() = nullptr;
  // Thread ids of the pool's threads, by their OpenMP thread number (0, the
  // caller, left out); written by each parked thread, read by the caller
  // after the region's closing barrier.
  std::vector<pid_t> tids_;
};

}  // namespace alf_env::penv
