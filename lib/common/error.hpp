// SPDX-License-Identifier: Apache-2.0
// Errors inside the runtime: an exception carrying a tutti_error code, a message and the place
// in tutti's source that threw it. Only the C ABI shim catches them; nothing else crosses the ABI.
#pragma once

#include <string>
#include <stdexcept>

#include "tutti.h"

namespace tutti {

// A place in tutti's source. As a default argument, SourceSite::here() is the caller's place:
// std::source_location, spelled with the builtins it is made of, as the CUDA sources are C++17.
struct SourceSite {
  const char* file = "";
  unsigned line = 0;
  static constexpr SourceSite here(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return {file, line};
  }
  std::string str() const;  // "lib/pool/pool.cpp:123", relative to the source tree
};

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& msg, SourceSite site = SourceSite::here())
      : std::runtime_error(msg), code_(code), site_(site) {}
  int code() const noexcept { return code_; }
  const SourceSite& site() const noexcept { return site_; }

 private:
  int code_;
  SourceSite site_;
};

// Each throws an Error whose site is the caller's (pass `site` on to keep an earlier one).
[[noreturn]] void fail(int code, const std::string& msg, SourceSite site = SourceSite::here());
// Like fail(), with ": <strerror(err)>" appended and the errno mapped to a tutti code.
[[noreturn]] void fail_errno(int err, const std::string& msg, SourceSite site = SourceSite::here());
// The tutti_error that best describes an errno value.
int code_from_errno(int err) noexcept;

// What a user is shown of an Error (tutti_last_error, the tool): its message, and when
// TUTTI_DEBUG is set to anything but 0, " [<site>]" after it. Tests match on the message, so
// the site never enters it otherwise.
std::string user_message(const Error& e);
// TUTTI_DEBUG is set to anything but 0.
bool debug_enabled();

}  // namespace tutti

// Checks an invariant of the caller's input; fails with TUTTI_EINVAL (or `code`) otherwise. The
// Error's site is the line of the check.
#define TUTTI_EXPECT(cond, msg) \
  do {                          \
    if (!(cond)) ::tutti::fail(TUTTI_EINVAL, (msg)); \
  } while (0)

#define TUTTI_EXPECT_CODE(cond, code, msg) \
  do {                                     \
    if (!(cond)) ::tutti::fail((code), (msg)); \
  } while (0)
