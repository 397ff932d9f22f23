// Errors inside the runtime: an exception carrying a tutti_error code and a message.
// Only the C ABI shim catches them; nothing else crosses the ABI.
#pragma once

#include <string>
#include <stdexcept>

#include "tutti.h"

namespace tutti {

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

[[noreturn]] void fail(int code, const std::string& msg);
// Like fail(), with ": <strerror(err)>" appended and the errno mapped to a tutti code.
[[noreturn]] void fail_errno(int err, const std::string& msg);
// The tutti_error that best describes an errno value.
int code_from_errno(int err) noexcept;

}  // namespace tutti

// Checks an invariant of the caller's input; fails with TUTTI_EINVAL (or `code`) otherwise.
#define TUTTI_EXPECT(cond, msg) \
  do {                          \
    if (!(cond)) ::tutti::fail(TUTTI_EINVAL, (msg)); \
  } while (0)

#define TUTTI_EXPECT_CODE(cond, code, msg) \
  do {                                     \
    if (!(cond)) ::tutti::fail((code), (msg)); \
  } while (0)
