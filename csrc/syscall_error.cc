#include "syscall_error.h"

#include <string.h>

namespace alf_env::penv {

std::string errno_text(int error_number) {
  char buffer[256];
  // GNU strerror_r (g++ defines _GNU_SOURCE): returns a pointer to the text,
  // which may or may not be `buffer`.
  const char* text = strerror_r(error_number, buffer, sizeof(buffer));
  return text;
}

void throw_syscall_error(const std::string& call, const std::string& what,
                         int error_number, const std::string& hint) {
  std::string message = call + "(" + what + ") failed: " +
                        errno_text(error_number) + " (errno " +
                        std::to_string(error_number) + ").";
  if (!hint.empty()) message += " " + hint;
  throw SyscallError(error_number, message);
}

}  // namespace alf_env::penv
