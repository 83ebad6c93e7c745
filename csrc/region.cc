#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "syscall_error.h"

namespace alf_env::penv {
namespace {

// The name only shows up in /proc/<pid>/fd and /proc/<pid>/maps (as
// "/memfd:alf_env_penv (deleted)"); it is not a file system entry.
constexpr char kMemfdDebugName[] = "alf_env_penv";

// Linux >= 6.3: a memfd that can never be made executable. Older headers lack
// the constant; older kernels reject the flag with EINVAL (we then retry
// without it). Without it, new kernels log a warning for every memfd_create.
#ifndef MFD_NOEXEC_SEAL
constexpr unsigned int kMfdNoexecSeal = 0x0008U;
#else
constexpr unsigned int kMfdNoexecSeal = MFD_NOEXEC_SEAL;
#endif

// The size may never change once other processes map the file.
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

std::string bytes(std::size_t size) { return std::to_string(size) + " bytes"; }

int create_memfd() {
  int fd = ::memfd_create(kMemfdDebugName,
                          MFD_CLOEXEC | MFD_ALLOW_SEALING | kMfdNoexecSeal);
  if (fd < 0 && errno == EINVAL) {
    // Kernel older than 6.3: no MFD_NOEXEC_SEAL.
    fd = ::memfd_create(kMemfdDebugName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  }
  if (fd < 0) {
    const int error = errno;
    throw_syscall_error("memfd_create", kMemfdDebugName, error,
                        error == ENOSYS
                            ? "alf_env needs Linux >= 3.17 for memfd_create."
                            : (error == EMFILE || error == ENFILE
                                   ? "Too many open files: raise the limit "
                                     "(ulimit -n) or close environments."
                                   : ""));
  }
  return fd;
}

Mapping map_shared(int fd, std::size_t size) {
  // MAP_POPULATE: fault the pages in now, not on the first step.
  void* address = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_POPULATE, fd, 0);
  if (address == MAP_FAILED) {
    const int error = errno;
    throw_syscall_error(
        "mmap", bytes(size) + ", fd " + std::to_string(fd), error,
        error == ENOMEM ? "Not enough memory or address space: use fewer "
                          "workers or smaller observations."
                        : "");
  }
  return Mapping(address, size);
}

void check_size(std::size_t size, const char* who) {
  if (size == 0) {
    throw std::invalid_argument(std::string(who) +
                                ": size must be > 0, got 0 bytes. Use "
                                "alf_env._penv.compute_layout() to get the "
                                "total size of a block.");
  }
  if (size > static_cast<std::size_t>(std::numeric_limits<off_t>::max())) {
    throw std::invalid_argument(std::string(who) + ": size " + bytes(size) +
                                " does not fit in off_t");
  }
}

}  // namespace

Mapping::Mapping(Mapping&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    unmap();
    address_ = std::exchange(other.address_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Mapping::~Mapping() { unmap(); }

void Mapping::unmap() noexcept {
  // munmap of a range we mapped ourselves cannot fail except for programming
  // errors (EINVAL); there is nothing to report from a destructor anyway.
  if (address_ != nullptr) ::munmap(address_, size_);
  address_ = nullptr;
  size_ = 0;
}

std::shared_ptr<SharedRegion> SharedRegion::create(std::size_t size) {
  check_size(size, "SharedRegion(size)");
  UniqueFd fd(create_memfd());
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    const int error = errno;
    throw_syscall_error("ftruncate", "memfd, " + bytes(size), error,
                        error == EFBIG || error == EINVAL
                            ? "The size is too large."
                            : "");
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, kSizeSeals) != 0) {
    throw_syscall_error("fcntl", "F_ADD_SEALS, F_SEAL_SHRINK|F_SEAL_GROW",
                        errno);
  }
  Mapping mapping = map_shared(fd.get(), size);
  return std::shared_ptr<SharedRegion>(
      new SharedRegion(std::move(fd), std::move(mapping)));
}

std::shared_ptr<SharedRegion> SharedRegion::attach(int fd, std::size_t size) {
  check_size(size, "SharedRegion.attach(fd, size)");
  if (fd < 0) {
    throw std::invalid_argument("SharedRegion.attach: fd must be >= 0, got " +
                                std::to_string(fd));
  }
  // Our own close-on-exec duplicate: the caller keeps (and closes) its fd.
  UniqueFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!own.valid()) {
    const int error = errno;
    throw_syscall_error("fcntl", "F_DUPFD_CLOEXEC, fd " + std::to_string(fd),
                        error,
                        error == EBADF ? "The descriptor is not open in this "
                                         "process: pass the region's fd via "
                                         "multiprocessing (DupFd) or fork."
                                       : "");
  }
  struct stat info {};
  if (::fstat(own.get(), &info) != 0) {
    throw_syscall_error("fstat", "fd " + std::to_string(fd), errno);
  }
  if (!S_ISREG(info.st_mode) ||
      static_cast<std::size_t>(info.st_size) != size) {
    throw std::invalid_argument(
        "SharedRegion.attach: expected a memory file of " + bytes(size) +
        ", got " +
        (S_ISREG(info.st_mode) ? "one of " + bytes(info.st_size)
                               : std::string("a descriptor that is not a "
                                             "regular file")) +
        " (fd " + std::to_string(fd) +
        "). Pass the fd and size of the SharedRegion created by the main "
        "process.");
  }
  Mapping mapping = map_shared(own.get(), size);
  return std::shared_ptr<SharedRegion>(
      new SharedRegion(std::move(own), std::move(mapping)));
}

std::shared_ptr<SharedRegion> require_region(std::shared_ptr<SharedRegion> region,
                                             const char* who) {
  if (!region) {
    throw std::invalid_argument(std::string(who) +
                                ": expected a SharedRegion, got None");
  }
  return region;
}

}  // namespace alf_env::penv
