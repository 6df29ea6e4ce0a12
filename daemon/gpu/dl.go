package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*gs_void_fn)(void);
typedef const char *(*gs_errstr_fn)(int);
static int gs_call_void(void *f) { return ((gs_void_fn)f)(); }
static const char *gs_call_errstr(void *f, int r) { return ((gs_errstr_fn)f)(r); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// NVMLLib is the NVML library loaded with dlopen for the calls taken from
// it with dlsym: those go-nvml has no binding for (the memory limits) or
// binds in a way a real driver defeats (per-process utilisation).
type NVMLLib struct {
	h     unsafe.Pointer
	Where string // the library's path as loaded
}

// LoadNVML loads libPath, else libnvidia-ml.so.1 (as Inventory does).
func LoadNVML(libPath string) (*NVMLLib, error) {
	where := "libnvidia-ml.so.1"
	if libPath != "" {
		where = libPath
	}
	cpath := C.CString(where)
	defer C.free(unsafe.Pointer(cpath))
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("load NVML %s: %s", where, C.GoString(C.dlerror()))
	}
	return &NVMLLib{h: h, Where: where}, nil
}

// Sym is the address of name in the library, nil when it has none.
func (l *NVMLLib) Sym(name string) unsafe.Pointer {
	c := C.CString(name)
	defer C.free(unsafe.Pointer(c))
	return C.dlsym(l.h, c)
}

// Init calls nvmlInit_v2: NVML's return code, or an error naming the
// library when it has no such call.
func (l *NVMLLib) Init() (int, error) {
	f := l.Sym("nvmlInit_v2")
	if f == nil {
		return 0, fmt.Errorf("NVML %s has no nvmlInit_v2", l.Where)
	}
	return int(C.gs_call_void(f)), nil
}

// ErrorString is nvmlErrorString's text for return code r.
func (l *NVMLLib) ErrorString(r int) string {
	f := l.Sym("nvmlErrorString")
	if f == nil {
		return "unknown"
	}
	return C.GoString(C.gs_call_errstr(f, C.int(r)))
}

// Close calls nvmlShutdown when start says NVML was started, and unloads
// the library.
func (l *NVMLLib) Close(started bool) {
	if started {
		if f := l.Sym("nvmlShutdown"); f != nil {
			C.gs_call_void(f)
		}
	}
	C.dlclose(l.h)
}
