// SharedRegion: an anonymous shared-memory region backed by a memfd.
//
// The region is created with memfd_create(MFD_CLOEXEC) + ftruncate + mmap
// (MAP_SHARED). It has no name anywhere: nothing appears in /dev/shm, and the
// kernel frees the memory when the last descriptor is closed and the last
// mapping is unmapped, in whichever process that happens and however the
// processes end (also when the creator is SIGKILLed).
//
// Other processes attach through a duplicate of the descriptor (inherited by
// fork, or passed over a Unix socket by multiprocessing). The size is sealed
// (F_SEAL_SHRINK | F_SEAL_GROW) so no process can truncate the file under the
// others' mappings (which would turn accesses into SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "unique_fd.h"

namespace alf_env::penv {

// Owns one mmap()ed range (RAII; munmap on destruction). Move-only.
class Mapping {
 public:
  Mapping() noexcept = default;
  Mapping(void* address, std::size_t size) noexcept
      : address_(address), size_(size) {}
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  std::uint8_t* data() const noexcept {
    return static_cast<std::uint8_t*>(address_);
  }
  std::size_t size() const noexcept { return size_; }

 private:
  void unmap() noexcept;

  void* address_ = nullptr;
  std::size_t size_ = 0;
};

// A shared mapping of a sealed memfd. Always held by std::shared_ptr: every
// object that points into the mapping (Python buffer views, Controller,
// WorkerPort) keeps a reference, so the mapping is never unmapped while
// anything can still touch it.
class SharedRegion {
 public:
  // Creates a new zero-filled region of `size` bytes (size > 0).
  static std::shared_ptr<SharedRegion> create(std::size_t size);

  // Maps the memfd `fd` (as created by create() in some process). `fd` is
  // duplicated: the caller keeps ownership of its descriptor and may close it
  // right away. Fails if the file does not have exactly `size` bytes.
  static std::shared_ptr<SharedRegion> attach(int fd, std::size_t size);

  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // The descriptor owned by this object (close-on-exec). Valid as long as
  // this object lives; pass a dup of it to other processes.
  int fd() const noexcept { return fd_.get(); }
  std::size_t size() const noexcept { return mapping_.size(); }
  std::uint8_t* data() const noexcept { return mapping_.data(); }

 private:
  SharedRegion(UniqueFd fd, Mapping mapping) noexcept
      : fd_(std::move(fd)), mapping_(std::move(mapping)) {}

  UniqueFd fd_;
  Mapping mapping_;
};

// Returns `region`, or throws std::invalid_argument naming `who` if it is null.
std::shared_ptr<SharedRegion> require_region(std::shared_ptr<SharedRegion> region,
                                             const char* who);

}  // namespace alf_env::penv
