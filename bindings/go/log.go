// SPDX-License-Identifier: Apache-2.0

package tutti

/*
#include <stdlib.h>
#include "tutti.h"

void tutti_go_log(int level, const char* message, void* user);  // log.c: calls tuttiGoLog
*/
import "C"

import (
	"sync"
	"unsafe"
)

// Levels of tutti's log (SetLogger).
const (
	LogError = int(C.TUTTI_LOG_ERROR)
	LogWarn  = int(C.TUTTI_LOG_WARN)
	LogInfo  = int(C.TUTTI_LOG_INFO)
	LogDebug = int(C.TUTTI_LOG_DEBUG)
)

var logger struct {
	sync.RWMutex
	f func(level int, message string)
}

// SetLogger sends tutti's log (chunks discarded for a failed checksum, torn records found at
// open, lookup clients hung up on, the backend chosen) up to level to f, called from tutti's
// own threads; nil stops it (the variable TUTTI_LOG then decides what goes to stderr).
func SetLogger(level int, f func(level int, message string)) {
	logger.Lock()
	logger.f = f
	logger.Unlock()
	var fn C.tutti_log_fn // nil: none
	if f != nil {
		fn = C.tutti_log_fn(C.tutti_go_log) // a C trampoline into tuttiGoLog
	}
	C.tutti_set_log_callback(fn, nil, C.int(level))
}

//export tuttiGoLog
func tuttiGoLog(level C.int, message *C.char, user unsafe.Pointer) {
	logger.RLock()
	f := logger.f
	logger.RUnlock()
	if f != nil {
		f(int(level), C.GoString(message))
	}
}
