// Named constants of the shared-memory protocol of alf_env._penv.
//
// Everything a main process and its workers must agree on lives here, so that
// a change of any of them is one edit plus a bump of kLayoutVersion.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace alf_env::penv {

// Version string of the native engine (exported as _penv.__version__).
inline constexpr char kEngineVersion[] = "1.0.0";

// Bump whenever the layout or the meaning of anything in the control block
// changes: a worker built from other sources then refuses to attach.
inline constexpr std::uint32_t kLayoutVersion = 5;

// First 8 bytes of an initialised control block ("ALFPENV1" in ASCII).
inline constexpr std::uint64_t kControlMagic = 0x414c4650454e5631ULL;

// Granularity of everything that different processes write concurrently:
// job slots, queue cells, data rows. 64 bytes is the line size of x86-64 and
// of most arm64 cores.
inline constexpr std::size_t kCacheLineSize = 64;

// Upper bound on num_workers, so that ids fit comfortably in the 32-bit
// payload of a queue cell and a typo cannot allocate gigabytes.
inline constexpr std::size_t kMaxWorkers = std::size_t{1} << 16;

// Values of the "sleeping" flags (a process announces it is about to sleep on
// a futex word so that wakers can skip the syscall when nobody sleeps).
inline constexpr std::uint32_t kAwake = 0;
inline constexpr std::uint32_t kSleeping = 1;

// Longest single futex sleep. After each slice a waiter checks Python signals
// (Ctrl-C) and the main process polls the pidfds of busy workers.
inline constexpr std::chrono::milliseconds kMaxSleepSlice{50};

// The main process polls the pidfds of busy workers at least this often, also
// while completions keep arriving (so a dead worker is reported promptly even
// when wait() never has to sleep).
inline constexpr std::chrono::milliseconds kPidPollInterval{50};

}  // namespace alf_env::penv
