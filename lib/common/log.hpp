// SPDX-License-Identifier: Apache-2.0
// What tutti tells the engine besides return codes: a process-wide sink (tutti_set_log_callback)
// for events no call returns, such as chunks discarded for a bad checksum, torn records found
// at open, or a lookup client hung up on. Quiet by default; without a callback, TUTTI_LOG=error|
// warn|info|debug (or TUTTI_DEBUG) prints to stderr.
#pragma once

#include <string>

#include "tutti.h"

namespace tutti {

void set_log_callback(tutti_log_fn fn, void* user, int level);
// Whether a message of this level reaches anyone: check before building an expensive one.
bool log_enabled(int level);
void log(int level, const std::string& message);

}  // namespace tutti
