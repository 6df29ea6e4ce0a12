package spanktest

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror -D_GNU_SOURCE
#include "../advice.c"
*/
import "C"

// Advise calls gs_advise: the kind (0 none, 1 lower, 2 more) and the ask.
func Advise(peak, quota, refused uint64) (int, uint64) {
	var ask C.uint64_t
	k := C.gs_advise(C.uint64_t(peak), C.uint64_t(quota), C.uint64_t(refused), &ask)
	return int(k), uint64(ask)
}

// Ask calls gs_format_ask.
func Ask(b uint64) string {
	var buf [64]C.char
	C.gs_format_ask(C.uint64_t(b), &buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}
