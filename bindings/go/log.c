// SPDX-License-Identifier: Apache-2.0
// The C side of SetLogger (log.go): tutti calls this on its own threads, and it calls into Go.
#include "_cgo_export.h"

void tutti_go_log(int level, const char* message, void* user) { tuttiGoLog(level, (char*)message, user); }
