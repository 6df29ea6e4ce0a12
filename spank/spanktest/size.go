// Package spanktest holds unit tests of the SPANK plugin. Its C size
// parser (spank/size.c) is exposed here through cgo so that it is checked
// against the same table as, and fuzzed against, internal/size: --gpu-mem
// must mean the same thing to srun and to every Go component.
package spanktest

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror -D_GNU_SOURCE
#include <stdlib.h>
#include "../size.c"
*/
import "C"

import "unsafe"

// Parse calls gs_parse_size.
func Parse(s string) (uint64, bool) {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	var b C.uint64_t
	if C.gs_parse_size(cs, &b) != 0 {
		return 0, false
	}
	return uint64(b), true
}

// Format calls gs_format_size.
func Format(b uint64) string {
	var buf [64]C.char
	C.gs_format_size(C.uint64_t(b), &buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}
