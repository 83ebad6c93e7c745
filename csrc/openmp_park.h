// OpenMpPark: puts the calling thread's OpenMP pool to sleep for a while.
//
// After each parallel region, libgomp's pool threads spin for milliseconds in
// case another region follows (torch's CPU kernels run on them). In a
// training loop the env step follows the policy's forward pass, so the
// trainer's own idle pool holds cores that the workers need for the step.
// Parking opens a parallel region whose team threads sleep on a futex until
// end(); the calling thread returns at once, steps, and end() wakes the team
// and closes the region. Unlike omp_pause_resource_all, the threads survive,
// so the next forward pass does not pay for creating them again.
//
// The region uses the runtime's GOMP_parallel_start/GOMP_parallel_end entry
// points (the GCC 4.x ABI, still exported by libgomp and, for compatibility,
// by LLVM's libomp and Intel's libiomp5). While parked, the calling thread is
// inside a parallel region: any OpenMP code it runs (a torch op) runs on that
// thread alone, as nested regions are serialized.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace alf_env::penv {

class OpenMpPark {
 public:
  // Binds to the OpenMP runtime at `runtime_path`, which must already be
  // loaded (it is looked up, never loaded). Throws std::runtime_error naming
  // the path and the loader's message if it is not loaded or lacks the entry
  // points.
  explicit OpenMpPark(const std::string& runtime_path);
  ~OpenMpPark();
  OpenMpPark(const OpenMpPark&) = delete;
  OpenMpPark& operator=(const OpenMpPark&) = delete;

  // Opens the region with the calling thread's default team size and parks
  // the team's other threads. No-op if already parked.
  void begin();
  // Wakes the parked threads and waits until the region closes. No-op if not
  // parked. Throws std::logic_error on another thread than begin()'s: only
  // the thread that opened a region may close it.
  void end();
  bool parked() const noexcept { return parked_; }

 private:
  using StartFn = void (*)(void (*)(void*), void*, unsigned);
  using EndFn = void (*)();

  static void park_team_thread(void* word) noexcept;

  void* handle_ = nullptr;
  StartFn start_ = nullptr;
  EndFn end_ = nullptr;
  // 0 while the team must sleep, 1 once end() releases it. Only this process
  // waits on it, but the shared futex helpers are used for one code path.
  std::atomic<std::uint32_t> release_{0};
  bool parked_ = false;
  pthread_t owner_{};  // the thread that called begin()
};

}  // namespace alf_env::penv
