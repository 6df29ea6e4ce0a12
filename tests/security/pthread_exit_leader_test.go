package security

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// pthreadExitLeader loads fakecuda's driver with ctypes (so the
// interceptor charges it), allocates, then ends its main thread with
// pthread_exit while another thread keeps the process (and its memory)
// alive. The process's leader is then a zombie; the process is not dead.
const pthreadExitLeader = `
import ctypes, threading, time, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
ptr = ctypes.c_uint64()
rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(200 << 20))
print("alloc rc=%d" % rc, flush=True)
threading.Thread(target=lambda: time.sleep(3600)).start()
libc = ctypes.CDLL(None)
libc.pthread_exit(None)
`

// A process whose main thread calls pthread_exit while its other threads
// keep running still holds its memory: its charge stays and the quota
// holds; neither the /proc sweep nor the TTL reaper reclaims it.
func TestPthreadExitLeaderStaysCharged(t *testing.T) {
	d := daemon(t, "--default-ttl", "300ms")
	id := session(t, d, "", 0, 256*MiB).ID
	p := startCmd(t, pythonCmd(t, pthreadExitLeader), jobEnv(t, d, id))
	if rc := p.Expect("alloc").Get("rc"); rc != "0" {
		t.Fatalf("alloc rc=%s\n%s", rc, p.Output())
	}
	pid := p.Cmd.Process.Pid
	probe.Eventually(t, 20*time.Second, "main thread exited", func() (bool, string) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return len(f) > 0 && f[0] == "Z", string(b)
	})
	// Many sweeps (every 100 ms) and TTL periods (300 ms) go by.
	time.Sleep(1500 * time.Millisecond)
	s, err := d.Client().GetSession(ctx(t), id)
	if err != nil {
		t.Fatalf("the session of a live process was reaped: %v", err)
	}
	if s.GPUs[0].UsedBytes != 200*MiB {
		t.Fatalf("a process with a live thread holding 200 MiB counts %d bytes", s.GPUs[0].UsedBytes)
	}
}
