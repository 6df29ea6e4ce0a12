package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// NVIDIA R615 (CUDA 13.4): NVML's memory limits per cgroup v2. go-nvml
// v0.13 has no bindings: the two calls are taken with dlsym from the NVML
// library the daemon loads, with the declarations of NVIDIA's API
// reference (no version field).
typedef int gs_ret;
typedef void *gs_dev;
typedef struct { const char *nameSpace; unsigned long long softLimit; unsigned long long hardLimit; } gs_set_limits;
typedef struct { const char *nameSpace; unsigned long long softLimit; unsigned long long hardLimit; unsigned long long currentUsed; } gs_get_limits;

typedef gs_ret (*gs_by_uuid_fn)(const char *, gs_dev *);
typedef gs_ret (*gs_set_fn)(gs_dev, gs_set_limits *);
typedef gs_ret (*gs_get_fn)(gs_dev, gs_get_limits *);

static gs_ret gs_by_uuid(void *f, const char *uuid, gs_dev *dev) { return ((gs_by_uuid_fn)f)(uuid, dev); }
static gs_ret gs_set(void *f, gs_dev dev, const char *ns, unsigned long long soft, unsigned long long hard)
{
	gs_set_limits l = { ns, soft, hard };
	return ((gs_set_fn)f)(dev, &l);
}
static gs_ret gs_get(void *f, gs_dev dev, const char *ns, unsigned long long *soft, unsigned long long *hard, unsigned long long *used)
{
	gs_get_limits l = { ns, 0, 0, 0 };
	gs_ret r = ((gs_get_fn)f)(dev, &l);
	*soft = l.softLimit;
	*hard = l.hardLimit;
	*used = l.currentUsed;
	return r;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// NVML return codes the memory-limit calls answer (nvml.h).
const (
	nvmlSuccess          = 0
	nvmlNotSupported     = 3
	nvmlNotFound         = 6
	nvmlFunctionNotFound = 13
)

// NoLimit is NVML_DEVICE_MEMORY_LIMIT_MAX: a hard limit of it with soft 0
// clears a cgroup's limit.
const NoLimit = ^uint64(0)

// MemLimitError is an NVML answer other than success.
type MemLimitError struct {
	Code int
	Text string
}

func (e *MemLimitError) Error() string { return fmt.Sprintf("%s (%d)", e.Text, e.Code) }

// NotFound: the path is not a cgroup the driver can limit (not a cgroup
// v2 directory, or one without the dmem controller's files).
func (e *MemLimitError) NotFound() bool { return e.Code == nvmlNotFound }

// ErrNoMemLimits: the NVML library has no memory-limit calls (before R615).
var ErrNoMemLimits = errors.New("NVML has no nvmlDeviceSetMemoryLimits_v1/nvmlDeviceGetMemoryLimits_v1 (driver before R615)")

// MemLimits calls NVML's memory limits per cgroup v2 on the node's GPUs
// (nvmlDeviceSetMemoryLimits_v1, nvmlDeviceGetMemoryLimits_v1). Safe for
// concurrent use.
type MemLimits struct {
	mu       sync.Mutex
	lib      *NVMLLib
	set, get unsafe.Pointer
	devs     []C.gs_dev // by inventory index
}

// OpenMemLimits loads the NVML library (libPath, else libnvidia-ml.so.1,
// as Inventory does) and takes the handles of gpus. ErrNoMemLimits when
// the library lacks the calls.
func OpenMemLimits(libPath string, gpus []GPU) (*MemLimits, error) {
	lib, err := LoadNVML(libPath)
	if err != nil {
		return nil, err
	}
	m := &MemLimits{lib: lib}
	m.set, m.get = lib.Sym("nvmlDeviceSetMemoryLimits_v1"), lib.Sym("nvmlDeviceGetMemoryLimits_v1")
	byUUID := lib.Sym("nvmlDeviceGetHandleByUUID")
	if m.set == nil || m.get == nil {
		lib.Close(false)
		return nil, ErrNoMemLimits
	}
	if byUUID == nil {
		lib.Close(false)
		return nil, fmt.Errorf("load NVML %s: no nvmlDeviceGetHandleByUUID", lib.Where)
	}
	if r, err := lib.Init(); err != nil || r != nvmlSuccess {
		if err == nil {
			err = fmt.Errorf("nvmlInit: %w", m.err(C.gs_ret(r)))
		}
		lib.Close(false)
		return nil, err
	}
	for _, g := range gpus {
		cu := C.CString(g.UUID)
		var dev C.gs_dev
		r := C.gs_by_uuid(byUUID, cu, &dev)
		C.free(unsafe.Pointer(cu))
		if r != nvmlSuccess {
			err := m.err(r)
			m.Close()
			return nil, fmt.Errorf("NVML device %s: %w", g.UUID, err)
		}
		m.devs = append(m.devs, dev)
	}
	return m, nil
}

func (m *MemLimits) err(r C.gs_ret) error {
	if r == nvmlSuccess {
		return nil
	}
	return &MemLimitError{Code: int(r), Text: m.lib.ErrorString(int(r))}
}

// Probe asks GPU i for the limits of the cgroup at path (a harmless read)
// and says whether the driver enforces memory limits on that GPU: the
// call answered success, or not-found for a cgroup it cannot limit. Not
// supported (a driver without them, a MIG-enabled GPU) or any other error
// is no; err says what NVML answered.
func (m *MemLimits) Probe(i int, path string) (bool, error) {
	_, _, _, err := m.Get(i, path)
	var me *MemLimitError
	if err == nil {
		return true, nil
	}
	if errors.As(err, &me) && me.NotFound() {
		return true, err
	}
	return false, err
}

// Set puts hard (soft 0) on GPU i for the cgroup v2 directory at path.
func (m *MemLimits) Set(i int, path string, hard uint64) error {
	return m.set2(i, path, 0, hard)
}

// Clear removes GPU i's limit on the cgroup at path (soft 0, hard
// NVML_DEVICE_MEMORY_LIMIT_MAX).
func (m *MemLimits) Clear(i int, path string) error {
	return m.set2(i, path, 0, NoLimit)
}

func (m *MemLimits) set2(i int, path string, soft, hard uint64) error {
	if i < 0 || i >= len(m.devs) {
		return fmt.Errorf("GPU %d: not in the inventory", i)
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lib == nil {
		return errors.New("NVML memory limits closed")
	}
	return m.err(C.gs_set(m.set, m.devs[i], cp, C.ulonglong(soft), C.ulonglong(hard)))
}

// Get reads GPU i's limits on the cgroup at path, and the bytes charged
// under them.
func (m *MemLimits) Get(i int, path string) (soft, hard, used uint64, err error) {
	if i < 0 || i >= len(m.devs) {
		return 0, 0, 0, fmt.Errorf("GPU %d: not in the inventory", i)
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lib == nil {
		return 0, 0, 0, errors.New("NVML memory limits closed")
	}
	var s, h, u C.ulonglong
	r := C.gs_get(m.get, m.devs[i], cp, &s, &h, &u)
	return uint64(s), uint64(h), uint64(u), m.err(r)
}

// Close drops the library (NVML's own init count keeps it usable for the
// daemon's other users).
func (m *MemLimits) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lib != nil {
		m.lib.Close(true)
		m.lib = nil
	}
}
