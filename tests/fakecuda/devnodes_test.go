package fakecuda

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// Device nodes (FAKECUDA_DEVICE_NODES): the driver opens nvidiactl,
// nvidia-uvm and nvidiaN as NVIDIA's does, and a node it may not open
// (here: the file's mode, for an unprivileged user) takes away what the
// real driver loses with it.

// nodeDir makes a directory of character devices like /dev's: nvidiactl
// (195:255), nvidia-uvm and one nvidiaN (195:N) per GPU. No driver owns
// these numbers here, so an open that is allowed fails with ENXIO.
func nodeDir(t *testing.T, gpus int, uvm bool) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("mknod needs root")
	}
	dir, err := os.MkdirTemp("", "fcnodes-") // not t.TempDir: the test user must reach it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, major, minor int) {
		if err := syscall.Mknod(filepath.Join(dir, name), syscall.S_IFCHR|0o666, major<<8|minor); err != nil {
			t.Fatalf("mknod %s: %v", name, err)
		}
		if err := os.Chmod(filepath.Join(dir, name), 0o666); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	mk("nvidiactl", 195, 255)
	if uvm {
		mk("nvidia-uvm", 509, 0)
	}
	for i := 0; i < gpus; i++ {
		mk("nvidia"+strconv.Itoa(i), 195, i)
	}
	return dir
}

// uuids are the UUIDs of the node's devices, in physical order, as CUDA
// shows them without device nodes.
func uuids(t *testing.T, n *node) []string {
	t.Helper()
	var out []string
	for _, ev := range n.run(nil, "fc_nodes").ok(t).all("device") {
		out = append(out, ev["uuid"])
	}
	return out
}

func deviceUUIDs(r result) []string {
	var out []string
	for _, ev := range r.all("device") {
		out = append(out, ev["uuid"])
	}
	return out
}

func asTestUser(t *testing.T, n *node) {
	u := testenv.User(t, testenv.TestUser1)
	n.attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
}

func TestDeviceNodesAllowed(t *testing.T) {
	n := newNode(t, "2x1GiB")
	all := uuids(t, n)
	dir := nodeDir(t, 2, true)
	r := n.run([]string{"FAKECUDA_DEVICE_NODES=" + dir}, "fc_nodes", "--alloc", "1MiB").ok(t)
	if ev := r.one(t, "init"); ev["result"] != "0" || ev["again"] != "0" {
		t.Fatalf("cuInit with every node allowed: %v", ev)
	}
	if got := deviceUUIDs(r); len(got) != 2 || got[0] != all[0] || got[1] != all[1] {
		t.Fatalf("devices %v, want %v", got, all)
	}
	if ev := r.one(t, "alloc"); ev["result"] != "0" {
		t.Fatalf("alloc: %v", ev)
	}
	for i, ev := range r.all("nvml_handle") {
		if ev["result"] != "0" || ev["uuid"] != all[i] {
			t.Fatalf("NVML handle %d: %v", i, ev)
		}
	}
}

func TestDeviceNodesMissing(t *testing.T) {
	n := newNode(t, "2x1GiB")
	empty := t.TempDir()
	r := n.run([]string{"FAKECUDA_DEVICE_NODES=" + empty}, "fc_nodes").ok(t)
	if ev := r.one(t, "init"); ev["result"] != "100" { // CUDA_ERROR_NO_DEVICE
		t.Fatalf("cuInit without nvidiactl: %v, want 100", ev)
	}
	if ev := r.one(t, "nvml_init"); ev["result"] != "9" { // NVML_ERROR_DRIVER_NOT_LOADED
		t.Fatalf("nvmlInit without nvidiactl: %v, want 9", ev)
	}

	noUVM := nodeDir(t, 2, false)
	r = n.run([]string{"FAKECUDA_DEVICE_NODES=" + noUVM}, "fc_nodes").ok(t)
	if ev := r.one(t, "init"); ev["result"] != "999" { // CUDA_ERROR_UNKNOWN
		t.Fatalf("cuInit without nvidia-uvm: %v, want 999", ev)
	}
	if ev := r.one(t, "nvml_count"); ev["result"] != "0" || ev["count"] != "2" {
		t.Fatalf("NVML needs no nvidia-uvm: %v", ev)
	}

	// without a node of its own a GPU is not enumerated
	oneGPU := nodeDir(t, 1, true)
	if got := deviceUUIDs(n.run([]string{"FAKECUDA_DEVICE_NODES=" + oneGPU}, "fc_nodes").ok(t)); len(got) != 1 {
		t.Fatalf("devices with only nvidia0: %v", got)
	}
}

// The descriptors the driver opens stay open, close-on-exec, once per process.
func TestDeviceNodesKeptOpen(t *testing.T) {
	n := newNode(t, "1GiB")
	dir := nodeDir(t, 1, true)
	// a node that really opens: /dev/null's numbers under nvidiactl's name
	ctl := filepath.Join(dir, "nvidiactl")
	if err := os.Remove(ctl); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(ctl, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	r := n.run([]string{"FAKECUDA_DEVICE_NODES=" + dir}, "fc_nodes").ok(t)
	fds := r.all("fd")
	if len(fds) != 1 || fds[0]["name"] != "nvidiactl" || fds[0]["cloexec"] != "1" {
		t.Fatalf("descriptors on the node directory after two cuInit: %v, want nvidiactl once, close-on-exec", fds)
	}
}

// A GPU whose node the process may not open (denied: mode 000, an
// unprivileged user) is not enumerated by CUDA, and CUDA_VISIBLE_DEVICES
// cannot reach it; NVML counts it but refuses its handle.
func TestDeviceNodesDenied(t *testing.T) {
	n := newNode(t, "2x1GiB")
	all := uuids(t, n)
	dir := nodeDir(t, 2, true)
	asTestUser(t, n)
	env := []string{"FAKECUDA_DEVICE_NODES=" + dir}

	if err := os.Chmod(filepath.Join(dir, "nvidia1"), 0); err != nil {
		t.Fatal(err)
	}
	r := n.run(env, "fc_nodes", "--alloc", "1MiB").ok(t)
	if got := deviceUUIDs(r); len(got) != 1 || got[0] != all[0] {
		t.Fatalf("devices with nvidia1 denied: %v, want [%s]\n%s%s", got, all[0], r.stdout, r.stderr)
	}
	if ev := r.one(t, "alloc"); ev["result"] != "0" {
		t.Fatalf("alloc on the allowed GPU: %v", ev)
	}
	if ev := r.one(t, "nvml_count"); ev["count"] != "2" {
		t.Fatalf("NVML count: %v, want 2", ev)
	}
	if hs := r.all("nvml_handle"); len(hs) != 2 || hs[0]["result"] != "0" || hs[1]["result"] != "4" {
		t.Fatalf("NVML handles: %v, want 0 then NVML_ERROR_NO_PERMISSION (4)", hs)
	}
	for _, cvd := range []string{all[1], all[1][:12], "1"} {
		r := n.run(append(env, "CUDA_VISIBLE_DEVICES="+cvd), "fc_nodes").ok(t)
		if ev := r.one(t, "init"); ev["result"] != "100" {
			t.Errorf("CUDA_VISIBLE_DEVICES=%s (only the denied GPU): %v, want CUDA_ERROR_NO_DEVICE", cvd, ev)
		}
	}

	// only nvidia1 allowed: it is the job's device 0
	if err := os.Chmod(filepath.Join(dir, "nvidia1"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "nvidia0"), 0); err != nil {
		t.Fatal(err)
	}
	r = n.run(append(env, "CUDA_VISIBLE_DEVICES=0"), "fc_nodes").ok(t)
	if got := deviceUUIDs(r); len(got) != 1 || got[0] != all[1] {
		t.Fatalf("CUDA_VISIBLE_DEVICES=0 with only nvidia1 allowed: %v, want [%s]", got, all[1])
	}

	// the control node denied: no device at all
	if err := os.Chmod(filepath.Join(dir, "nvidiactl"), 0); err != nil {
		t.Fatal(err)
	}
	r = n.run(env, "fc_nodes").ok(t)
	if ev := r.one(t, "init"); ev["result"] != "100" {
		t.Fatalf("cuInit with nvidiactl denied: %v, want 100", ev)
	}
	if ev := r.one(t, "nvml_init"); ev["result"] != "4" {
		t.Fatalf("nvmlInit with nvidiactl denied by its mode: %v, want NVML_ERROR_NO_PERMISSION (4)", ev)
	}
}
