// SPDX-License-Identifier: Apache-2.0
// Argument parsing shared by the subcommands. A bad argument is reported on stderr as
// "tutti <command>: ..." and means exit 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "resolver/uri.hpp"

namespace tutti::cli {

// Walks a subcommand's arguments: a flag, then its value when it takes one.
class Args {
 public:
  Args(const char* command, int argc, char** argv) : command_(command), argc_(argc), argv_(argv) {}

  // The next argument, or nullptr after the last.
  const char* next() { return i_ < argc_ ? argv_[i_++] : nullptr; }
  // The value of the flag next() just returned; exits 2 when there is none.
  const char* value();
  // value() as a positive size ("2048", "4K") of at most `max`; exits 2 for anything else.
  size_t positive(size_t max = SIZE_MAX);

 private:
  const char* command_;
  int argc_;
  char** argv_;
  int i_ = 0;
};

// Prints "tutti <command>: <message>" on stderr and returns 2, the exit status of a bad command
// line, so that a parser can `return usage_error(...)`.
[[gnu::format(printf, 2, 3)]] int usage_error(const char* command, const char* fmt, ...);

// "a,b,,c" -> {"a", "b", "c"}
std::vector<std::string> split_list(const std::string& list);

// A flag without a value, and where to note that it was given.
struct Flag {
  const char* name;
  bool* set;
};

// The pool files named by stats and fsck, noting which of `flags` were among the arguments.
// Throws TUTTI_EINVAL for another argument that starts with "-", and when no pool is named.
std::vector<PoolUri> pool_args(int argc, char** argv, std::initializer_list<Flag> flags);

}  // namespace tutti::cli
