package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pyxisSetup makes the cluster's nodes run pyxis jobs for the rest of the
// test: pyxis built against this release's headers (make containers, make
// pyxis-releases) in plugstack.conf beside gpuslice's plugin,
// enroot (make containers) on slurmstepd's PATH, and enroot's system
// configuration with gpuslice's hook as the package ships it, a stand-in
// for NVIDIA's hook that binds fakecuda's libraries and device nodes into
// the container,
// and per-user data directories (the test users have no home). Everything
// is put back when the test ends. It returns the Debian 11 image.
func pyxisSetup(t *testing.T, c *cluster) string {
	t.Helper()
	if slurm.pyxis == "" {
		t.Skipf("no pyxis jobs on Slurm %s: %s", slurm.name, slurm.noPyxis)
	}
	// enroot's wrapper and configuration below are shared by every run on
	// the machine (the lanes of make test-slurm-all): one pyxis test at a
	// time. Registered first, the lock goes last, after every file is back.
	lock, err := takeLock("/run/gpuslice-enroot-suite.lock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	ct := filepath.Join(c.build, "containers")
	for name, dir := range map[string]string{"pyxis": filepath.Join(c.build, slurm.pyxis), "enroot": filepath.Join(ct, "enroot")} {
		if b, err := os.ReadFile(filepath.Join(dir, "UNAVAILABLE")); err == nil {
			t.Skipf("%s was not built: %s", name, strings.TrimSpace(string(b)))
		}
		if _, err := os.Stat(filepath.Join(dir, "COMMIT")); err != nil {
			t.Fatalf("%s is not built for Slurm %s (make containers pyxis-releases): %v", name, slurm.name, err)
		}
	}
	image := filepath.Join(ct, "images", "bullseye.sqsh")
	if _, err := os.Stat(image); err != nil {
		t.Fatalf("no container image (make container-image): %v", err)
	}

	// slurmd's PATH is this process's: enroot where every PATH looks.
	// A wrapper a killed run left (it names itself) is replaced.
	const mark = "# gpuslice tests/slurm: enroot of the build"
	wrapper := "/usr/local/bin/enroot"
	if b, err := os.ReadFile(wrapper); err == nil && !strings.Contains(string(b), mark) {
		t.Fatalf("%s exists: the test will not replace a machine's enroot", wrapper)
	} else if err == nil {
		os.Remove(wrapper)
	}
	bin := filepath.Join(ct, "enroot", "bin")
	put(t, wrapper, "#!/bin/sh\n"+mark+"\nPATH="+bin+":$PATH exec "+bin+"/enroot \"$@\"\n", 0o755)

	etc := filepath.Join(ct, "enroot", "etc", "enroot")
	hook, err := repoText("etc/enroot/50-gpuslice.sh")
	if err != nil {
		t.Fatal(err)
	}
	put(t, filepath.Join(etc, "hooks.d", "50-gpuslice.sh"), hook, 0o755)
	// enroot's own cgroup hook shows the container its cgroups, the
	// hierarchies /proc/self/cgroup names: on this hybrid host the cgroup v1
	// ones too, which a node (cgroup2 alone at its /sys/fs/cgroup) cannot
	// show, and the container fails to start. It plays no part in what is
	// tested (gpusliced reads a process's cgroup from outside).
	put(t, filepath.Join(etc, "hooks.d", "10-cgroups.sh"), "#!/bin/sh\nexit 0\n", 0o755)
	put(t, filepath.Join(etc, "hooks.d", "97-fakecuda.sh"), `#! /usr/bin/env bash
set -euo pipefail
for lib in `+c.bin("libcuda")+" "+c.bin("nvml")+`; do
    printf '%s /usr/lib/x86_64-linux-gnu/%s none x-create=file,bind,ro,nosuid,nodev,private\n' "${lib}" "$(basename "${lib}")" >> "${ENROOT_MOUNTS}"
done
# The GPUs' device nodes, as nvidia-container-cli binds /dev/nvidia*.
if [ -n "${FAKECUDA_DEVICE_NODES-}" ]; then
    printf '%s %s none x-create=dir,bind,ro,nosuid,private\n' "${FAKECUDA_DEVICE_NODES}" "${FAKECUDA_DEVICE_NODES}" >> "${ENROOT_MOUNTS}"
fi
for v in FAKECUDA_STATE FAKECUDA_CTX_BYTES FAKECUDA_DEVICE_NODES; do
    if [ -n "${!v-}" ]; then printf '%s=%s\n' "${v}" "${!v}" >> "${ENROOT_ENVIRON}"; fi
done
`, 0o755)
	data := c.path("enroot")
	for _, d := range []string{"run", "cache", "data", "tmp"} {
		if err := os.MkdirAll(filepath.Join(data, d), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(data, d), 0o1777)
	}
	conf := filepath.Join(etc, "enroot.conf")
	old, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	put(t, conf, string(old)+`
ENROOT_RUNTIME_PATH `+data+`/run/user-$(id -u)
ENROOT_CACHE_PATH `+data+`/cache/user-$(id -u)
ENROOT_DATA_PATH `+data+`/data/user-$(id -u)
ENROOT_TEMP_PATH `+data+`/tmp
ENROOT_LOGIN_SHELL false
`, 0o644)

	plugstack := c.path("plugstack.conf")
	ps, err := os.ReadFile(plugstack)
	if err != nil {
		t.Fatal(err)
	}
	put(t, plugstack, string(ps)+"required "+filepath.Join(c.build, slurm.pyxis, "lib", "slurm", "spank_pyxis.so")+
		" runtime_path="+filepath.Join(data, "run")+"\n", 0o644)
	return image
}

// put writes path for the rest of the test: the file it replaces comes
// back (or the new one goes) when the test ends.
func put(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	old, err := os.ReadFile(path)
	existed := err == nil
	t.Cleanup(func() {
		if existed {
			os.WriteFile(path, old, mode)
		} else {
			os.Remove(path)
		}
	})
	if err := writeFile(path, text, mode); err != nil {
		t.Fatal(err)
	}
}

// `srun --container-image=IMG --gpu-mem=1G`: pyxis runs the task in an
// enroot container of a Debian 11 image (glibc 2.31) on a node; the
// packaged enroot hook brings the interceptor and gpusliced's socket in,
// so the program inside sees 1 GiB, gets CUDA_ERROR_OUT_OF_MEMORY past it,
// and the job's session is released at its end. A task in the container
// that drops LD_PRELOAD and takes more than the quota is stopped by the
// node's audit, or, on a node whose driver has memory limits, refused at
// allocation by the driver.
func TestPyxisContainerHeldToQuota(t *testing.T) {
	c := needCluster(t)
	image := pyxisSetup(t, c)
	u := c.users["gsltest1"]
	// The hook's view under pyxis: the task's variables are not set yet
	// when pyxis starts the container; the cluster's interceptor and
	// socket are not at the packaged paths.
	env := []string{"GPUSLICE_LIB=" + c.bin("interceptor"), "GPUSLICE_IPC_SOCK=" + c.ipcSock}

	cmd := c.cmd(u, "srun", "--gpu-mem=1G", "--container-image="+image, "sh", "-c",
		"echo job=$SLURM_JOB_ID; exec /usr/local/bin/gs_probe dev:0 meminfo nvml alloc:768M alloc:512M")
	cmd.Env = append(cmd.Env, env...)
	r := run(ctxFor(t, 3*time.Minute), cmd)
	if r.code != 0 {
		t.Fatalf("srun --container-image: %s", r)
	}
	id := checkHeldInContainer(t, r)
	c.assertReleased(t, id)

	// Without the interceptor, over the quota: the audit stops it long
	// before its sleep ends.
	cmd = c.cmd(u, "srun", "-w", c.auditNode(t).Name, "--gpu-mem=1G", "--container-image="+image, "sh", "-c",
		"echo job=$SLURM_JOB_ID; exec env -u LD_PRELOAD /usr/local/bin/gs_probe dev:0 meminfo alloc:1536M sleep:60000")
	cmd.Env = append(cmd.Env, env...)
	start := time.Now()
	r = run(ctxFor(t, 3*time.Minute), cmd)
	t.Logf("the bypassing job ended after %v", time.Since(start).Round(time.Millisecond))
	if r.code == 0 || !strings.Contains(r.stdout, "alloc rc=0 bytes=1610612736") {
		t.Fatalf("a bypassing task holding 1.5 GiB of a 1 GiB job: %s", r)
	}
	id, _ = probeLines(r.stdout)
	c.assertReleased(t, id)
	if h := c.history(t, id); h.AuditKilled < 1 {
		t.Errorf("job %s's report does not say the audit stopped its task: %+v", id, h)
	}

	// Where the node's driver enforces the quota (its memory limit on the
	// job's cgroup, which the container's processes stay in), the same
	// task is refused at allocation and ends by itself.
	if !tracking.cgroup {
		return
	}
	cmd = c.cmd(u, "srun", "--constraint=gpuslice_driver_limit", "--gpu-mem=1G", "--container-image="+image, "sh", "-c",
		"echo job=$SLURM_JOB_ID; exec env -u LD_PRELOAD sh -c "+
			"'grep -q libgpuslice /proc/$$/maps && echo interceptor=loaded || echo interceptor=absent; "+
			"exec /usr/local/bin/gs_probe dev:0 meminfo alloc:768M alloc:512M'")
	cmd.Env = append(cmd.Env, env...)
	r = run(ctxFor(t, 3*time.Minute), cmd)
	if r.code != 0 {
		t.Fatalf("a task without the interceptor on a node whose driver has the limit (it must end by itself): %s", r)
	}
	id, _ = probeLines(r.stdout)
	if !strings.Contains(r.stdout, "interceptor=absent") {
		t.Fatalf("the task still had the interceptor: %s", r)
	}
	if !strings.Contains(r.stdout, "alloc rc=0 bytes=805306368") || !strings.Contains(r.stdout, "alloc rc=2 bytes=536870912") {
		t.Errorf("the driver did not refuse the allocation past the job's 1 GiB with CUDA_ERROR_OUT_OF_MEMORY: %s", r)
	}
	c.assertReleased(t, id)
	if h := c.history(t, id); h.AuditKilled != 0 {
		t.Errorf("job %s: the audit killed %d processes; the driver should have refused instead: %+v", id, h.AuditKilled, h)
	}
}

// probeLines reads a job's output: the id it printed ("job=ID") and the
// first line of each of the probe's records, by name.
func probeLines(out string) (id string, first map[string]string) {
	first = map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "job="); ok {
			id = v
		}
		if name, _, ok := strings.Cut(l, " "); ok {
			if _, seen := first[name]; !seen {
				first[name] = l
			}
		}
	}
	return id, first
}

// checkHeldInContainer checks what a job that printed its id and ran
// "gs_probe dev:0 meminfo nvml alloc:768M alloc:512M" in a container
// under --gpu-mem=1G printed: both queries show 1 GiB, the first
// allocation succeeded and the second, past the quota, failed with
// CUDA_ERROR_OUT_OF_MEMORY. It returns the job's id.
func checkHeldInContainer(t *testing.T, r result) string {
	t.Helper()
	id, lines := probeLines(r.stdout)
	if id == "" {
		t.Fatalf("no job id in the output: %s", r)
	}
	for name, want := range map[string]string{
		"meminfo": "total=1073741824",
		"nvmldev": "total1=1073741824",
		"alloc":   "rc=0 bytes=805306368",
	} {
		if !strings.Contains(lines[name], want) {
			t.Errorf("%s in the container: %q, want %s\n%s", name, lines[name], want, r)
		}
	}
	if !strings.Contains(r.stdout, "alloc rc=2 bytes=536870912") {
		t.Errorf("the allocation past the quota was not refused with CUDA_ERROR_OUT_OF_MEMORY:\n%s", r)
	}
	return id
}
