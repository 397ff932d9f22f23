// SPDX-License-Identifier: Apache-2.0
// An Error knows where it was thrown: the line of the check, as a path in the source tree.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <string>

#include "common/error.hpp"

namespace tutti {

TEST(Error, ExpectRecordsItsLine) {
  const unsigned line = __LINE__ + 2;
  try {
    TUTTI_EXPECT_CODE(1 + 1 == 3, TUTTI_ESTATE, "arithmetic");
    FAIL() << "TUTTI_EXPECT_CODE did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_ESTATE);
    EXPECT_STREQ(e.what(), "arithmetic");
    EXPECT_EQ(e.site().line, line);
    EXPECT_EQ(e.site().str(), "tests/unit/error_test.cpp:" + std::to_string(line));
  }
}

TEST(Error, KeepsAnEarlierSite) {
  unsigned line = 0;
  try {
    try {
      line = __LINE__ + 1;
      fail_errno(ENOENT, "open x");
    } catch (const Error& inner) {
      fail(inner.code(), std::string("pool: ") + inner.what(), inner.site());
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), TUTTI_EACCES);
    EXPECT_STREQ(e.what(), "pool: open x: No such file or directory");
    EXPECT_EQ(e.site().line, line);
  }
}

TEST(Error, UserMessageHasTheSiteOnlyUnderDebug) {
  const Error e(TUTTI_EIO, "disk on fire");
  const std::string site = " [tests/unit/error_test.cpp:" + std::to_string(__LINE__ - 1) + "]";
  ::unsetenv("TUTTI_DEBUG");
  EXPECT_EQ(user_message(e), "disk on fire");
  ::setenv("TUTTI_DEBUG", "0", 1);
  EXPECT_EQ(user_message(e), "disk on fire");
  ::setenv("TUTTI_DEBUG", "1", 1);
  EXPECT_EQ(user_message(e), "disk on fire" + site);
  ::unsetenv("TUTTI_DEBUG");
}

}  // namespace tutti
