package fakecuda

import (
	"encoding/binary"
	"syscall"
	"testing"
	"unsafe"
)

// Device nodes under a real device cgroup: a cgroup v2 BPF_CGROUP_DEVICE
// program, what Slurm's ConstrainDevices=yes attaches to a job's cgroup,
// refuses the open of the nodes a job was not given (EPERM), as root too.

const (
	sysBPF              = 321 // amd64
	bpfProgLoad         = 5
	bpfProgAttach       = 8
	bpfProgTypeCgDevice = 15
	bpfCgroupDevice     = 6 // attach type
)

type devNum struct{ major, minor uint32 }

// bpfInsn encodes one eBPF instruction.
func bpfInsn(code uint8, dst, src uint8, off int16, imm int32) []byte {
	b := make([]byte, 8)
	b[0] = code
	b[1] = dst | src<<4
	binary.LittleEndian.PutUint16(b[2:], uint16(off))
	binary.LittleEndian.PutUint32(b[4:], uint32(imm))
	return b
}

// denyProgram allows every device but the given character devices.
func denyProgram(deny []devNum) []byte {
	const (
		ldxw  = 0x61 // BPF_LDX|BPF_MEM|BPF_W
		movK  = 0xb7 // BPF_ALU64|BPF_MOV|BPF_K
		jneK  = 0x55 // BPF_JMP|BPF_JNE|BPF_K
		ja    = 0x05 // BPF_JMP|BPF_JA
		exit_ = 0x95 // BPF_JMP|BPF_EXIT
	)
	var p []byte
	p = append(p, bpfInsn(ldxw, 2, 1, 4, 0)...) // r2 = ctx->major
	p = append(p, bpfInsn(ldxw, 3, 1, 8, 0)...) // r3 = ctx->minor
	n := len(deny)
	for k, d := range deny {
		base := 2 + 3*k
		p = append(p, bpfInsn(jneK, 2, 0, 2, int32(d.major))...)
		p = append(p, bpfInsn(jneK, 3, 0, 1, int32(d.minor))...)
		p = append(p, bpfInsn(ja, 0, 0, int16(2+3*n+2-(base+3)), 0)...)
	}
	p = append(p, bpfInsn(movK, 0, 0, 0, 1)...) // allow
	p = append(p, bpfInsn(exit_, 0, 0, 0, 0)...)
	p = append(p, bpfInsn(movK, 0, 0, 0, 0)...) // deny
	p = append(p, bpfInsn(exit_, 0, 0, 0, 0)...)
	return p
}

func bpf(cmd uintptr, attr []byte) (uintptr, error) {
	r, _, errno := syscall.Syscall(sysBPF, cmd, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// constrainDevices attaches a device program denying deny to cgroup dir.
func constrainDevices(t *testing.T, dir string, deny []devNum) {
	t.Helper()
	insns := denyProgram(deny)
	license := []byte("GPL\x00")
	attr := make([]byte, 128)
	binary.LittleEndian.PutUint32(attr[0:], bpfProgTypeCgDevice)
	binary.LittleEndian.PutUint32(attr[4:], uint32(len(insns)/8))
	binary.LittleEndian.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&insns[0]))))
	binary.LittleEndian.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	prog, err := bpf(bpfProgLoad, attr)
	if err != nil {
		t.Skipf("cannot load a BPF_CGROUP_DEVICE program: %v", err)
	}
	defer syscall.Close(int(prog))
	cg, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(cg)
	attr = make([]byte, 128)
	binary.LittleEndian.PutUint32(attr[0:], uint32(cg))
	binary.LittleEndian.PutUint32(attr[4:], uint32(prog))
	binary.LittleEndian.PutUint32(attr[8:], bpfCgroupDevice)
	if _, err := bpf(bpfProgAttach, attr); err != nil {
		t.Skipf("cannot attach a device program to %s: %v", dir, err)
	}
}

// runNodesIn runs fc_nodes as a process of cgroup dir.
func runNodesIn(t *testing.T, n *node, dir string, env []string) result {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	n.attr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	defer func() { n.attr = nil }()
	return n.run(env, "fc_nodes").ok(t)
}

func TestDeviceNodesDeviceCgroup(t *testing.T) {
	n := newNode(t, "2x1GiB")
	all := uuids(t, n)
	dir := nodeDir(t, 2, true)
	env := []string{"FAKECUDA_DEVICE_NODES=" + dir}

	// a job given GPU 0 only
	job := newCgroup(t, "")
	constrainDevices(t, job, []devNum{{195, 1}})
	r := runNodesIn(t, n, job, env)
	if got := deviceUUIDs(r); len(got) != 1 || got[0] != all[0] {
		t.Fatalf("devices under a device cgroup denying nvidia1: %v, want [%s]\n%s", got, all[0], r.stdout)
	}
	if hs := r.all("nvml_handle"); len(hs) != 2 || hs[0]["result"] != "0" || hs[1]["result"] != nvmlNoPermission {
		t.Fatalf("NVML handles under the device cgroup: %v", hs)
	}
	for _, cvd := range []string{all[1], "1"} {
		r := runNodesIn(t, n, job, append(env, "CUDA_VISIBLE_DEVICES="+cvd))
		if ev := r.one(t, "init"); ev["result"] != "100" {
			t.Errorf("CUDA_VISIBLE_DEVICES=%s under the device cgroup: %v, want CUDA_ERROR_NO_DEVICE", cvd, ev)
		}
	}

	// a job given no GPU (Slurm still allows nvidiactl and nvidia-uvm)
	none := newCgroup(t, "")
	constrainDevices(t, none, []devNum{{195, 0}, {195, 1}})
	r = runNodesIn(t, n, none, append(env, "CUDA_VISIBLE_DEVICES=0,1"))
	if ev := r.one(t, "init"); ev["result"] != "100" {
		t.Fatalf("a job given no GPU, CUDA_VISIBLE_DEVICES=0,1: %v, want CUDA_ERROR_NO_DEVICE", ev)
	}

	// the control node denied: NVML's "Unknown Error"
	noctl := newCgroup(t, "")
	constrainDevices(t, noctl, []devNum{{195, 255}})
	r = runNodesIn(t, n, noctl, env)
	if ev := r.one(t, "init"); ev["result"] != "100" {
		t.Fatalf("cuInit with nvidiactl denied by the cgroup: %v", ev)
	}
	if ev := r.one(t, "nvml_init"); ev["result"] != "999" {
		t.Fatalf("nvmlInit with nvidiactl denied by the cgroup: %v, want NVML_ERROR_UNKNOWN (999)", ev)
	}
}
