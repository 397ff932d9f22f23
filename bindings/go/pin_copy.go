// SPDX-License-Identifier: Apache-2.0

//go:build !go1.21

package tutti

/*
#include <stdlib.h>
#include <string.h>
#include "tutti.h"
*/
import "C"

import "unsafe"

// pins: before Go 1.21 there is no runtime.Pinner, and cgo forbids C from keeping a Go pointer
// after a call returns, while the runtime reads a batch's token ids and block tables until the
// batch is done. So with older Go they are copied into C memory, freed when the batch closes
// (4 bytes per token or block: small next to the KV bytes). Go 1.21 and later pin them instead.
type pins struct{ mem []unsafe.Pointer }

func (p *pins) int32s(s []int32) (*C.int32_t, C.size_t) {
	ptr, n := p.copy(unsafe.Pointer(&s), len(s)*4, len(s))
	return (*C.int32_t)(ptr), n
}

func (p *pins) bytes(s []byte) (unsafe.Pointer, C.size_t) {
	return p.copy(unsafe.Pointer(&s), len(s), len(s))
}

// copy duplicates the slice whose header is at hdr (bytes long, count elements).
func (p *pins) copy(hdr unsafe.Pointer, bytes, count int) (unsafe.Pointer, C.size_t) {
	if count == 0 {
		return nil, 0
	}
	src := *(*unsafe.Pointer)(hdr) // the slice's data pointer
	dst := C.malloc(C.size_t(bytes))
	C.memcpy(dst, src, C.size_t(bytes))
	p.mem = append(p.mem, dst)
	return dst, C.size_t(count)
}

func (p *pins) release() {
	for _, m := range p.mem {
		C.free(m)
	}
	p.mem = nil
}
