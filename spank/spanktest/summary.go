package spanktest

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror -D_GNU_SOURCE
#include <stdlib.h>
#include "../summary.c"
*/
import "C"

import "unsafe"

// Summary calls gs_summary_format with a buffer of capacity bytes.
func Summary(json, job, step, node string, capacity int) string {
	cj := C.CString(json)
	defer C.free(unsafe.Pointer(cj))
	cjob, cstep, cnode := C.CString(job), C.CString(step), C.CString(node)
	defer C.free(unsafe.Pointer(cjob))
	defer C.free(unsafe.Pointer(cstep))
	defer C.free(unsafe.Pointer(cnode))
	buf := (*C.char)(C.malloc(C.size_t(capacity + 1)))
	defer C.free(unsafe.Pointer(buf))
	n := C.gs_summary_format(cj, C.size_t(len(json)), cjob, cstep, cnode, buf, C.size_t(capacity))
	return C.GoStringN(buf, C.int(n))
}
