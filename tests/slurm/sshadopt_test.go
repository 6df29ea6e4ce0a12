package slurm

// ssh into a node through pam_slurm_adopt, as sites let their users reach
// the nodes of their running jobs: each node runs OpenSSH's sshd on its
// address, its PAM account stack ending with Slurm's pam_slurm_adopt,
// which lets a user in only while a job of theirs runs on the node and
// moves the login into that job's cgroup (its extern step: PrologFlags=
// Contain). A process started so never passed through the SPANK plugin:
// it has no interceptor unless its user preloads it, and names whatever
// session it likes. The job's quota holds all the same: gpusliced finds
// the process's job by its cgroup (docs/audit.md), and its audit stops
// what bypasses the interceptor.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// pamSlurmAdopt is Debian 12's pam_slurm_adopt (package libpam-slurm-adopt,
// make deps), built against its Slurm 22.05.
const pamSlurmAdopt = "/lib/security/pam_slurm_adopt.so"

// sshWhy says why this run's clusters cannot log users in over ssh
// through pam_slurm_adopt; "" when they can.
func sshWhy() string {
	if slurm.name != slurm2205.name {
		return "pam_slurm_adopt here is Debian 12's, for its Slurm 22.05; this run is on " + slurm.name
	}
	if !tracking.cgroup {
		return "pam_slurm_adopt adopts a login into its job's cgroup; this run tracks jobs without cgroups"
	}
	return ""
}

// sshPAM is the node's /etc/pam.d/sshd: no password (keys only), the
// account checked by pam_unix then pam_slurm_adopt (the node named: one
// machine runs several slurmd), nothing that would move the login out of
// the job's cgroup again (pam_systemd: Slurm's documentation says to leave
// it out).
const sshPAM = `auth     required pam_deny.so
account  required pam_unix.so
account  required %s nodename=%s
password required pam_deny.so
session  required pam_unix.so
`

const sshdConfig = `ListenAddress %s:22
HostKey %s
PidFile none
UsePAM yes
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile %s/authorized_keys.%%u
StrictModes no
PermitRootLogin no
X11Forwarding no
PrintMotd no
PrintLastLog no
UseDNS no
LogLevel VERBOSE
`

// setupSsh makes the cluster's host key and a key for each user that
// logs in (its shell /bin/sh: sshd runs commands through it), once.
func (c *cluster) setupSsh(users ...*testUser) error {
	dir := c.path("ssh")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(pamSlurmAdopt); err != nil {
		return fmt.Errorf("no %s: make deps installs libpam-slurm-adopt", pamSlurmAdopt)
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "host_ed25519")).CombinedOutput(); err != nil {
		return fmt.Errorf("ssh-keygen (host key): %v: %s", err, out)
	}
	for _, u := range users {
		if err := testenv.LoginShell(u.name); err != nil {
			return err
		}
		key := filepath.Join(u.dir, "ssh_id")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
			return fmt.Errorf("ssh-keygen (%s): %v: %s", u.name, err, out)
		}
		if err := os.Chown(key, int(u.uid), int(u.gid)); err != nil {
			return err
		}
		pub, err := os.ReadFile(key + ".pub")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "authorized_keys."+u.name), pub, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startSshd starts node n's sshd, its PAM file bound over /etc/pam.d/sshd
// in the node's mounts (once: they outlast the node's "reboot"), and waits
// until it answers.
func (n *node) startSshd() error {
	c := n.c
	dir := filepath.Join(n.dir, "ssh")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pam, conf := filepath.Join(dir, "pam"), filepath.Join(dir, "sshd_config")
	if err := writeFile(pam, fmt.Sprintf(sshPAM, pamSlurmAdopt, n.Name), 0o644); err != nil {
		return err
	}
	if err := writeFile(conf, fmt.Sprintf(sshdConfig, n.Addr, c.path("ssh", "host_ed25519"), c.path("ssh")), 0o644); err != nil {
		return err
	}
	bind := `mkdir -p -m 0755 /run/sshd && { mountpoint -q /etc/pam.d/sshd || mount --bind "$0" /etc/pam.d/sshd; }`
	if out, err := n.command("sh", "-c", bind, pam).CombinedOutput(); err != nil {
		return fmt.Errorf("node %s: PAM file for sshd: %v: %s", n.Name, err, out)
	}
	cmd := n.command("/usr/sbin/sshd", "-D", "-e", "-f", conf)
	// pam_slurm_adopt reads the cluster's slurm.conf (SLURM_CONF), in
	// sshd's process for the login.
	cmd.Env = append(baseEnv(), "SLURM_CONF="+c.conf)
	if err := c.start("sshd-"+n.Name, cmd); err != nil {
		return err
	}
	return waitFor(15*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", n.Addr+":22", time.Second)
		if err != nil {
			return fmt.Errorf("node %s: sshd does not answer: %w", n.Name, err)
		}
		return conn.Close()
	})
}

// ssh runs command on node n as u, logged in over ssh with u's key.
func (n *node) ssh(ctx context.Context, u *testUser, command string) result {
	cmd := n.c.cmd(u, "ssh", "-F", "/dev/null", "-i", filepath.Join(u.dir, "ssh_id"), "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "ConnectTimeout=10", u.name+"@"+n.Addr, command)
	return run(ctx, cmd)
}

// remoteEnv is the environment a command needs on a node to find the
// fake GPUs: nothing crosses ssh (no SendEnv), as on a site where a
// login gets the node's environment, not the job's.
func (c *cluster) remoteEnv() string {
	return "env " + shellJoin(c.fakeEnv)
}

// A user with no job on a node is refused there; with a job, the login is
// adopted into the job's cgroup, and whatever it runs is held to the
// job's quota: without the interceptor, the audit stops it past the
// quota; with it, naming another job's session, it is attached to its
// own job and refused past the quota.
func TestSshAdopt(t *testing.T) {
	c := needCluster(t)
	if !c.opts.Ssh {
		t.Skipf("this cluster runs no sshd (GPUSLICE_SLURM_QUAD=1 on Slurm 22.05 with cgroups, as make test-slurm runs it, has pam_slurm_adopt): %s", sshWhy())
	}
	u, other := c.users["gsltest3"], c.users["gsltest1"]
	n := c.nodes[0]
	ctx := ctxFor(t, 5*time.Minute)

	// pam_slurm_adopt's "you have no active jobs on this node" does not
	// reach a client that logs in with a key (sshd shows account
	// messages after a login only); sshd's log says who refused.
	r := n.ssh(ctx, u, "true")
	if log := readFile(t, c.path("log", "sshd-"+n.Name+".out")); r.code != 255 ||
		!strings.Contains(log, "Access denied for user "+u.name+" by PAM account configuration") {
		t.Fatalf("ssh to %s without a job there was not refused by its PAM account stack: %s\nsshd:\n%s", n.Name, r, log)
	}

	neighbour := c.sbatch(t, other, "ssh-neighbour", "#!/bin/sh\nexec sleep 300\n", "--gpu-mem=1G", "-w", n.Name)
	id := c.sbatch(t, u, "ssh-adopt", "#!/bin/sh\nexec sleep 300\n", "--gpu-mem=512M", "-w", n.Name)
	for _, j := range []string{neighbour, id} {
		if err := waitFor(2*time.Minute, func() error { _, err := n.session(j); return err }); err != nil {
			t.Fatalf("job %s's session on %s: %v", j, n.Name, err)
		}
	}

	r = n.ssh(ctx, u, "cat /proc/self/cgroup")
	if r.code != 0 || !strings.Contains(r.stdout, "/job_"+id+"/step_extern") {
		t.Fatalf("the login is not in job %s's extern step: %s", id, r)
	}

	// Without the interceptor: 1.5 GiB against 512 MiB, stopped by the
	// audit while the job runs.
	out := filepath.Join(u.dir, "ssh-nopreload.out")
	r = n.ssh(ctx, u, fmt.Sprintf("exec %s %s --api driver --step 512M --count 3 --hold 60 >%s 2>&1",
		c.remoteEnv(), c.bin("target_app"), out))
	evs := events(readFile(t, out))
	start := find(evs, "start")
	if r.code == 0 || start == nil || strings.Count(readFile(t, out), "status=allowed") != 3 {
		t.Fatalf("the login's process without the interceptor was not stopped after taking 1.5 GiB (exit %d):\n%s", r.code, readFile(t, out))
	}

	// With the interceptor, naming the neighbour's session: its own job's
	// quota.
	r = n.ssh(ctx, u, fmt.Sprintf("exec %s LD_PRELOAD=%s GPUSLICE_IPC_SOCK=%s GPUSLICE_SESSION=%s %s --api driver --step 256M --count 3",
		c.remoteEnv(), c.bin("interceptor"), c.ipcSock, neighbour, c.bin("target_app")))
	if r.code != 0 {
		t.Fatalf("the login's process with the interceptor: %s", r)
	}
	if sum := find(events(r.stdout), "summary"); sum == nil || sum["allowed"] != "2" || sum["denied"] != "1" {
		t.Fatalf("the login's process naming job %s's session was not held to job %s's 512 MiB (2 of 256 MiB allowed, 1 denied): %s", neighbour, id, r)
	}

	_ = c.cmd(nil, "scancel", id, neighbour).Run()
	c.assertReleased(t, id)
	h := c.history(t, id)
	if h.AuditKilled < 1 || !strings.Contains(strings.Join(h.Audit, "\n"), "killed pid "+start["pid"]) {
		t.Errorf("job %s's report does not say the audit killed the login's process %s: %+v", id, start["pid"], h)
	}
	var denied uint64
	for _, g := range h.GPUs {
		denied += g.Denied
	}
	if denied < 1 {
		t.Errorf("job %s's report counts no refusal of the login's process with the interceptor: %+v", id, h)
	}
	c.assertReleased(t, neighbour)
	for _, g := range c.history(t, neighbour).GPUs {
		if g.PeakBytes != 0 || g.AuditPeakBytes != 0 || g.Denied != 0 {
			t.Errorf("job %s (the neighbour) was charged for the login's processes: %+v", neighbour, g)
		}
	}
}
