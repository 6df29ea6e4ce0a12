package slurm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/debroot"
)

// containerStateDir is where an Apptainer container sees the node's
// /dev/shm (fakecuda's device state): under --contain the container's
// /dev is its own, into which only device nodes can be bound.
const containerStateDir = "/var/lib/fakecuda-state"

// slurmApptainer is Apptainer (make containers) as a node runs it for a
// job's user, unprivileged (user namespaces, squashfuse): with the build's
// apptainer.conf plus gpuslice's snippet (conf), or unchanged (plain) for
// jobs that get the binds from gpuslice's TaskProlog script (taskProlog,
// given to srun as --task-prolog, which slurmstepd runs as it runs
// slurm.conf's TaskProlog: as the user, its "export" lines going into the
// task's environment). The packaged paths (/usr/lib/gpuslice,
// /run/gpuslice, the ld.so.preload file) are the cluster's.
type slurmApptainer struct {
	bin, conf, plain, taskProlog, image string
}

// nodeDevDir is where a node shows its containers fakecuda's device nodes
// (the cluster's, FAKECUDA_DEVICE_NODES): in /dev, as NVIDIA's are,
// because Apptainer gives device access only to what comes from there
// (the node's /dev without --contain; under --contain, each /dev path the
// job binds, as --nv binds /dev/nvidia*) and makes every other bind nodev.
// On this machine the directory is empty (removed when the test ends, and
// by make test-clean); each node binds the cluster's nodes on it in its own
// mount namespace.
func nodeDevDir() string { return "/dev/" + netTag + "-nvidia" }

// apptainerSetup readies the nodes for Apptainer jobs for the rest of the
// test. A node's /dev/fuse is open to every user as on a Debian or RHEL
// node (udev makes it 0666); this machine's is root's only, so each node
// gets one of mode 0666 bound over it, in its own mount namespace; and the
// GPUs' device nodes at nodeDevDir.
func apptainerSetup(t *testing.T, c *cluster) *slurmApptainer {
	t.Helper()
	if debroot.Inside() {
		t.Skip("Apptainer runs on this machine's nodes (its squashfuse and /dev/fuse), not in the Debian 13 root's")
	}
	ct := filepath.Join(c.build, "containers")
	if b, err := os.ReadFile(filepath.Join(ct, "apptainer", "UNAVAILABLE")); err == nil {
		t.Skipf("apptainer was not built: %s", strings.TrimSpace(string(b)))
	}
	if _, err := os.Stat(filepath.Join(ct, "apptainer", "COMMIT")); err != nil {
		t.Fatalf("apptainer is not built (make containers): %v", err)
	}
	a := &slurmApptainer{bin: filepath.Join(ct, "apptainer", "bin", "apptainer"),
		image: filepath.Join(ct, "images", "bullseye.sqsh")}
	if _, err := os.Stat(a.image); err != nil {
		t.Fatalf("no container image (make container-image): %v", err)
	}

	fuse := c.path("dev", "fuse")
	if err := mknod(fuse, 10<<8|229); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	devDir := nodeDevDir()
	if err := os.Mkdir(devDir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(devDir) })
	for _, n := range c.nodes {
		script := `mount --bind "$1" /dev/fuse && mount --bind "$2" "$3"`
		if out, err := n.command("sh", "-c", script, "sh", fuse, c.path("dev"), devDir).CombinedOutput(); err != nil {
			t.Fatalf("node %s's /dev/fuse and GPU device nodes: %v: %s", n.Name, err, out)
		}
		t.Cleanup(func() { n.command("umount", "/dev/fuse", devDir).Run() })
	}

	dir := c.path("apptainer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(ct, "apptainer", "etc", "apptainer", "apptainer.conf"))
	if err != nil {
		t.Fatal(err)
	}
	lib, run := filepath.Dir(c.bin("interceptor")), filepath.Dir(c.ipcSock)
	preload := filepath.Join(dir, "ld.so.preload")
	put(t, preload, c.bin("interceptor")+"\n", 0o644)
	a.plain = filepath.Join(dir, "plain.conf")
	put(t, a.plain, string(base), 0o644)

	// The packaged socket directory is /run/gpuslice, on the node and in
	// the container; the cluster's is elsewhere on the node, so it is
	// bound twice: where the job's GPUSLICE_IPC_SOCK names it, and at
	// /run/gpuslice, the interceptor's default (--cleanenv).
	snippet, err := repoText("etc/apptainer/gpuslice.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("/usr/share/gpuslice/apptainer/ld.so.preload", preload,
		"/usr/lib/gpuslice", lib,
		"bind path = /run/gpuslice", "bind path = "+run+":/run/gpuslice\nbind path = "+run).Replace(snippet)
	if !strings.Contains(conf, preload) || !strings.Contains(conf, lib) || !strings.Contains(conf, run) {
		t.Fatalf("etc/apptainer/gpuslice.conf no longer has the packaged paths the test replaces:\n%s", snippet)
	}
	a.conf = filepath.Join(dir, "gpuslice.conf")
	put(t, a.conf, string(base)+"\n"+conf, 0o644)

	script, err := repoText("etc/apptainer/taskprolog.sh")
	if err != nil {
		t.Fatal(err)
	}
	tp := strings.NewReplacer("/usr/share/gpuslice/apptainer/ld.so.preload", preload,
		"/usr/lib/gpuslice", lib,
		"/run/gpuslice:/run/gpuslice:ro", run+":/run/gpuslice:ro,"+run+":"+run+":ro",
		"/run/gpuslice/ipc.sock", c.ipcSock).Replace(script)
	if strings.Contains(tp, "/usr/lib/gpuslice") || strings.Contains(tp, "/run/gpuslice/ipc.sock") {
		t.Fatalf("etc/apptainer/taskprolog.sh has packaged paths the test does not replace:\n%s", tp)
	}
	a.taskProlog = filepath.Join(dir, "taskprolog.sh")
	put(t, a.taskProlog, tp, 0o755)
	return a
}

// repoText reads a file of the source tree.
func repoText(rel string) (string, error) {
	p, err := repoFile(rel)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	return string(b), err
}

// srun is the arguments of `srun SRUNARGS apptainer exec FLAGS IMAGE
// argv...`, printing the job's id first. fakecuda (the driver) comes in as --nv
// brings NVIDIA's: its libraries bound into the image's library
// directory, its device nodes (nodeDevDir; --contain's /dev has only
// what is bound) and state (the node's /dev/shm) bound, its settings in
// the container's environment.
func (a *slurmApptainer) srun(c *cluster, conf string, srunArgs, flags []string, argv ...string) []string {
	args := append(srunArgs, "sh", "-c", `echo job=$SLURM_JOB_ID; exec "$@"`, "sh",
		a.bin, "--config", conf, "--quiet", "exec")
	args = append(args, flags...)
	for _, lib := range []string{c.bin("libcuda"), c.bin("nvml")} {
		args = append(args, "--bind", lib+":/usr/lib/x86_64-linux-gnu/"+filepath.Base(lib))
	}
	for _, f := range flags {
		if f == "--contain" {
			args = append(args, "--bind", nodeDevDir())
		}
	}
	args = append(args, "--bind", "/dev/shm:"+containerStateDir,
		"--env", "FAKECUDA_STATE_DIR="+containerStateDir, "--env", "FAKECUDA_STATE="+c.state,
		"--env", "FAKECUDA_CTX_BYTES=0", "--env", "FAKECUDA_DEVICE_NODES="+nodeDevDir(), a.image)
	return append(args, argv...)
}

// A job's program run with `apptainer exec` of a Debian 11 image (glibc
// 2.31) inside a `srun --gpu-mem=1G` job, as the job's user, is held to
// the job's quota with each way of running it the node's configuration
// covers: apptainer.conf's bind paths (plain, --nv, --cleanenv: the
// host's LD_PRELOAD or the bound ld.so.preload), or gpuslice's TaskProlog
// binds, which --contain keeps. Queries show 1 GiB, the allocation past it
// fails with CUDA_ERROR_OUT_OF_MEMORY, and the session is released at job
// end. A program that drops the bind paths and the environment and takes
// more than the quota is stopped by the node's audit, or refused at
// allocation where the node's driver has memory limits.
func TestApptainerJobHeldToQuota(t *testing.T) {
	c := needCluster(t)
	a := apptainerSetup(t, c)
	u := c.users["gsltest1"]
	for _, tc := range []struct {
		name     string
		conf     string
		srunArgs []string
		flags    []string
	}{
		{"apptainer.conf: exec", a.conf, nil, nil},
		{"apptainer.conf: exec --nv", a.conf, nil, []string{"--nv"}},
		{"apptainer.conf: exec --cleanenv", a.conf, nil, []string{"--cleanenv"}},
		{"TaskProlog: exec --contain", a.plain, []string{"--task-prolog=" + a.taskProlog}, []string{"--contain"}},
		{"TaskProlog: exec --nv --cleanenv --contain", a.plain, []string{"--task-prolog=" + a.taskProlog},
			[]string{"--nv", "--cleanenv", "--contain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(ctxFor(t, 3*time.Minute), c.cmd(u, "srun", a.srun(c, tc.conf,
				append([]string{"--gpu-mem=1G"}, tc.srunArgs...), tc.flags,
				"/usr/local/bin/gs_probe", "dev:0", "meminfo", "nvml", "alloc:768M", "alloc:512M")...))
			if r.code != 0 {
				t.Fatalf("srun apptainer exec: %s", r)
			}
			id := checkHeldInContainer(t, r)
			c.assertReleased(t, id)
		})
	}

	t.Run("bypass: exec --no-mount bind-paths --cleanenv", func(t *testing.T) {
		start := time.Now()
		r := run(ctxFor(t, 3*time.Minute), c.cmd(u, "srun", a.srun(c, a.conf,
			[]string{"-w", c.auditNode(t).Name, "--gpu-mem=1G"}, []string{"--no-mount", "bind-paths", "--cleanenv"},
			"/usr/local/bin/gs_probe", "dev:0", "meminfo", "alloc:1536M", "sleep:60000")...))
		t.Logf("the bypassing job ended after %v", time.Since(start).Round(time.Millisecond))
		id, lines := probeLines(r.stdout)
		if strings.Contains(lines["meminfo"], "total=1073741824") {
			t.Fatalf("the bypassing program still had the interceptor: %s", r)
		}
		if r.code == 0 {
			t.Fatalf("a bypassing program holding 1.5 GiB of a 1 GiB job: %s", r)
		}
		if id == "" {
			t.Fatalf("no job id in the output: %s", r)
		}
		c.assertReleased(t, id)
		// What the program printed last may not reach srun's output when
		// it is killed (a fresh machine's .ci/run got "init rc=0" alone):
		// the audit's own line says what it held.
		h := c.history(t, id)
		t.Logf("job %s's audit: %s", id, strings.Join(h.Audit, "; "))
		if h.AuditKilled < 1 {
			t.Errorf("job %s's report does not say the audit stopped its program: %+v", id, h)
		}
		if audit := strings.Join(h.Audit, "\n"); !strings.Contains(r.stdout, "alloc rc=0 bytes=1610612736") &&
			!strings.Contains(audit, "held against a quota of 1GiB") {
			t.Errorf("neither the program's output nor the audit shows it held 1.5 GiB: %s\naudit: %s", r, audit)
		}
	})

	// Where the node's driver enforces the quota on the job's cgroup, which
	// Apptainer's processes stay in, the same program is refused at
	// allocation and ends by itself.
	t.Run("bypass on a node whose driver has the limit", func(t *testing.T) {
		if !tracking.cgroup {
			t.Skip("the cluster runs without cgroups: the driver's limits are set on cgroups")
		}
		r := run(ctxFor(t, 3*time.Minute), c.cmd(u, "srun", a.srun(c, a.conf,
			[]string{"--constraint=gpuslice_driver_limit", "--gpu-mem=1G"}, []string{"--no-mount", "bind-paths", "--cleanenv"},
			"sh", "-c", "grep -q libgpuslice /proc/$$/maps && echo interceptor=loaded || echo interceptor=absent; "+
				"exec /usr/local/bin/gs_probe dev:0 alloc:768M alloc:512M")...))
		if r.code != 0 {
			t.Fatalf("a program without the interceptor on a node whose driver has the limit (it must end by itself): %s", r)
		}
		if !strings.Contains(r.stdout, "interceptor=absent") {
			t.Fatalf("the program still had the interceptor: %s", r)
		}
		if !strings.Contains(r.stdout, "alloc rc=0 bytes=805306368") || !strings.Contains(r.stdout, "alloc rc=2 bytes=536870912") {
			t.Errorf("the driver did not refuse the allocation past the job's 1 GiB with CUDA_ERROR_OUT_OF_MEMORY: %s", r)
		}
		id, _ := probeLines(r.stdout)
		c.assertReleased(t, id)
		if h := c.history(t, id); h.AuditKilled != 0 {
			t.Errorf("job %s: the audit killed %d processes; the driver should have refused instead: %+v", id, h.AuditKilled, h)
		}
	})
}
