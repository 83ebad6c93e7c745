// SyscallError: a failed OS call, carrying errno and a helpful message.
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>

namespace alf_env::penv {

// Thrown when a system call fails. The bindings translate it into Python's
// OSError(errno, message), so callers can match e.g. ProcessLookupError.
class SyscallError : public std::runtime_error {
 public:
  SyscallError(int error_number, const std::string& message)
      : std::runtime_error(message), error_number_(error_number) {}

  int error_number() const noexcept { return error_number_; }

 private:
  int error_number_;
};

// Returns strerror(error_number) (thread-safe).
std::string errno_text(int error_number);

// Throws SyscallError for `call` (e.g. "mmap") with `error_number`, e.g.
// "mmap(4096 bytes) failed: Cannot allocate memory (errno 12). <hint>".
// `what` describes the arguments, `hint` (may be empty) suggests a fix.
[[noreturn]] void throw_syscall_error(const std::string& call,
                                      const std::string& what,
                                      int error_number,
                                      const std::string& hint = "");

}  // namespace alf_env::penv
