// SPDX-License-Identifier: Apache-2.0

//go:build go1.21

package tutti

/*
#include "tutti.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// pins keeps Go memory that the runtime reads after a call returns in place (runtime.Pinner):
// token ids and block tables are read where they are, never copied.
type pins struct{ p runtime.Pinner }

func (p *pins) int32s(s []int32) (*C.int32_t, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	p.p.Pin(&s[0])
	return (*C.int32_t)(unsafe.Pointer(&s[0])), C.size_t(len(s))
}

func (p *pins) bytes(s []byte) (unsafe.Pointer, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	p.p.Pin(&s[0])
	return unsafe.Pointer(&s[0]), C.size_t(len(s))
}

func (p *pins) release() { p.p.Unpin() }
