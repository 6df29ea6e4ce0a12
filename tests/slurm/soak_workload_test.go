package slurm

// What the soak's users run: the honest users' jobs and the hostile
// user's attacks, from the schedule's entries (soak_schedule_test.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/debroot"
	"github.com/gpuslice/gpuslice/internal/ipc"
)

// soakRole runs this binary as one of the soak's helpers (copyHelper):
// GPUSLICE_SOAK_ROLE=short-flood sends SOAK_N SHORTs for GPU SOAK_GPU to
// gpusliced's IPC socket SOAK_SOCK over four connections, as a local
// user with no job does. ok is false when the binary is not a helper.
func soakRole() (code int, ok bool) {
	if os.Getenv("GPUSLICE_SOAK_ROLE") != "short-flood" {
		return 0, false
	}
	n, _ := strconv.Atoi(os.Getenv("SOAK_N"))
	var sent, refused int
	for k := 0; k < 4; k++ {
		c, err := ipc.Dial(os.Getenv("SOAK_SOCK"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		for i := 0; i < n/4; i++ {
			sent++
			var re *ipc.RemoteError
			if err := c.Short(os.Getenv("SOAK_GPU")); errors.As(err, &re) {
				refused++
			} else if err != nil {
				fmt.Fprintln(os.Stderr, err)
				c.Close()
				return 1, true
			}
		}
		c.Close()
	}
	fmt.Printf("event=flood sent=%d refused=%d\n", sent, refused)
	return 0, true
}

func (s *soak) targetApp() string { return s.c.bin("target_app") }
func (s *soak) launcher() string {
	return filepath.Join(s.c.build, "tests", "fakecuda", "fc_launcher")
}

// sbatch submits a script as u, trying again while slurmctld is away (a
// restart fault); "" when it was refused.
func (s *soak) sbatch(u *testUser, kind, script string, args ...string) string {
	path := filepath.Join(u.dir, "soak-"+kind+".sh")
	s.mu.Lock()
	err := writeFile(path, script, 0o755)
	if err == nil {
		// each job gets its own copy: a later job of the kind rewrites it
		p := fmt.Sprintf("%s.%d", path, len(s.jobs)+len(s.submitFa))
		err = writeFile(p, script, 0o755)
		path = p
	}
	s.mu.Unlock()
	if err != nil {
		s.logf("sbatch %s: %v", kind, err)
		return ""
	}
	args = append([]string{"--parsable", "--time=5", "-o", filepath.Join(u.dir, "soak-%j.out")}, args...)
	var r result
	for try := 0; try < 12; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		r = run(ctx, s.c.cmd(u, "sbatch", append(args, path)...))
		cancel()
		if r.code == 0 || !strings.Contains(r.stderr, "contact") {
			break
		}
		time.Sleep(10 * time.Second)
	}
	m := reSubmitted.FindStringSubmatch(strings.TrimSpace(r.stdout))
	if r.code != 0 || m == nil {
		s.mu.Lock()
		s.submitFa[kind]++
		s.mu.Unlock()
		s.logf("sbatch %s as %s refused: %s", kind, u.name, r)
		return ""
	}
	s.addJob(m[1], kind, u.name, u == s.hostile)
	s.logf("job %s: %s of %s (%v)", m[1], kind, u.name, args[4:])
	return m[1]
}

func (s *soak) user(name string) *testUser { return s.c.users[name] }

// holdCmd is target_app holding count steps of mib for secs.
func (s *soak) holdCmd(mib uint64, count, secs int) string {
	return fmt.Sprintf("%s --step %dM --count %d --hold %d", s.targetApp(), mib, count, secs)
}

// submitHonest submits an honest user's job: an allocation of half its
// quota held for its time, in the way of its kind.
func (s *soak) submitHonest(e soakEvent) {
	u := s.user(e.User)
	q := fmt.Sprintf("--gpu-mem=%dM", e.MiB)
	step := e.MiB / 4
	hold := s.holdCmd(step, 2, e.Secs)
	switch e.What {
	case "share":
		s.sbatch(u, e.What, "#!/bin/sh\nexec "+hold+"\n", q)
	case "array":
		s.sbatch(u, e.What, "#!/bin/sh\nexec "+hold+"\n", q, fmt.Sprintf("--array=0-%d", e.N-1))
	case "multinode":
		s.sbatch(u, e.What, "#!/bin/sh\nexec srun "+hold+"\n", q, "-N", strconv.Itoa(e.N))
	case "whole":
		s.sbatch(u, e.What, "#!/bin/sh\nexec "+s.holdCmd(1024, 2, e.Secs)+"\n", q, "--gres=gpu:1")
	case "compute":
		s.sbatch(u, e.What, fmt.Sprintf("#!/bin/sh\ntimeout %d %s 2 8\nexit 0\n", e.Secs, s.launcher()),
			q, fmt.Sprintf("--gpu-compute=%d", e.Pct))
	case "steps":
		var b strings.Builder
		b.WriteString("#!/bin/sh\n")
		for i := 0; i < e.N; i++ {
			fmt.Fprintf(&b, "srun %s\n", s.holdCmd(step, 1, 1+e.Secs/e.N))
		}
		s.sbatch(u, e.What, b.String(), q)
	case "apptainer":
		// a program of a Debian 11 image run with apptainer exec in the
		// job, as apptainer_test.go runs it (the node's apptainer.conf
		// with gpuslice's snippet), holding half the quota
		if s.app == nil {
			s.logf("apptainer job of %s run as a share: %s", u.name, s.appWhy)
			s.sbatch(u, "share", "#!/bin/sh\nexec "+hold+"\n", q)
			return
		}
		argv := s.app.srun(s.c, s.app.conf, nil, nil, "/usr/local/bin/gs_probe", "dev:0", "meminfo",
			fmt.Sprintf("alloc:%dM", e.MiB/2), fmt.Sprintf("sleep:%d", e.Secs*1000))
		s.sbatch(u, e.What, "#!/bin/sh\nexec srun "+shellJoin(argv)+"\n", q)
	case "interactive":
		// srun from the submit host, as a user at a terminal: the soak
		// learns the job's id from the task's SLURM_JOB_ID.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(e.Secs)*time.Second+15*time.Minute)
		defer cancel()
		cmd := s.c.cmd(u, "srun", q, "--time=5", "sh", "-c", "echo event=job job=$SLURM_JOB_ID; exec "+hold)
		r := run(ctx, cmd)
		id := ""
		for _, ev := range events(r.stdout) {
			if ev["job"] != "" {
				id = ev["job"]
			}
		}
		if id == "" {
			s.mu.Lock()
			s.submitFa[e.What]++
			s.mu.Unlock()
			s.logf("srun of %s: no job: %s", u.name, r)
			return
		}
		s.addJob(id, e.What, u.name, false)
		s.logf("job %s: interactive srun of %s ended: exit %d", id, u.name, r.code)
	}
}

// shellJoin quotes each word for sh.
func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// soakApptainer readies the nodes for the soak's Apptainer jobs
// (apptainerSetup), or says why there are none: the run in the Debian 13
// root, or an Apptainer the build could not make. Those jobs then run as
// plain shares.
func soakApptainer(t *testing.T, c *cluster) (*slurmApptainer, string) {
	if debroot.Inside() {
		return nil, "Apptainer runs on this machine's nodes, not in the Debian 13 root's"
	}
	if b, err := os.ReadFile(filepath.Join(c.build, "containers", "apptainer", "UNAVAILABLE")); err == nil {
		return nil, "apptainer was not built: " + strings.TrimSpace(string(b))
	}
	return apptainerSetup(t, c), ""
}

// attack runs one of the hostile user's attacks.
func (s *soak) attack(e soakEvent) {
	u := s.hostile
	q := fmt.Sprintf("--gpu-mem=%dM", e.MiB)
	w := "--nodelist=" + e.Node
	s.mu.Lock()
	s.attacks[e.What]++
	s.mu.Unlock()
	switch e.What {
	case "nopreload":
		// three times the quota, with the interceptor taken out
		s.sbatch(u, e.What, "#!/bin/sh\nexec env -u LD_PRELOAD "+s.holdCmd(e.MiB/2, 6, e.Secs)+"\n", q, w)
	case "burst":
		// several processes at once, each after twice the quota
		var b strings.Builder
		b.WriteString("#!/bin/sh\n")
		for i := 0; i < e.N; i++ {
			fmt.Fprintf(&b, "%s &\n", s.holdCmd(e.MiB/2, 4, e.Secs))
		}
		b.WriteString("wait\n")
		s.sbatch(u, e.What, b.String(), q, w)
	case "fork-storm":
		// a bounded storm: N processes attach at once, 32 MiB each
		script := fmt.Sprintf("#!/bin/sh\ni=0\nwhile [ $i -lt %d ]; do %s & i=$((i+1)); done\nwait\n", e.N, s.holdCmd(32, 1, 3))
		s.sbatch(u, e.What, script, q, w)
	case "short-flood":
		s.shortFlood(e)
	case "paced-bypass":
		s.pacedBypass(e)
	case "ssh-adopt":
		s.sshAdopt(e)
	}
}

// sshAdopt: the hostile user logs in over ssh (sshadopt_test.go) to the
// node of a job of its own, where pam_slurm_adopt puts the login in the
// job's cgroup, and there holds three times the job's quota without the
// interceptor: the audit must stop it within its window
// (quota-audit-window). Before the job, the same login is tried: refused
// unless another of its jobs runs there (logged).
func (s *soak) sshAdopt(e soakEvent) {
	c, u := s.c, s.hostile
	q, w := fmt.Sprintf("--gpu-mem=%dM", e.MiB), "--nodelist="+e.Node
	hold := s.holdCmd(e.MiB/2, 6, e.Secs)
	if !c.opts.Ssh {
		s.logf("ssh-adopt: no sshd here (%s): the job holds the same without the interceptor instead", sshWhy())
		s.sbatch(u, e.What, "#!/bin/sh\nexec env -u LD_PRELOAD "+hold+"\n", q, w)
		return
	}
	n := c.nodeByName(e.Node)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(e.Secs)*time.Second+5*time.Minute)
	defer cancel()
	r := n.ssh(ctx, u, "true")
	s.logf("ssh-adopt: login to %s before the job: exit %d", n.Name, r.code)
	id := s.sbatch(u, e.What, fmt.Sprintf("#!/bin/sh\nexec sleep %d\n", e.Secs+30), q, w)
	if id == "" {
		return
	}
	defer func() { _ = c.cmd(nil, "scancel", id).Run() }()
	if err := waitFor(3*time.Minute, func() error { _, err := n.session(id); return err }); err != nil {
		s.logf("ssh-adopt: job %s has no session on %s: %v", id, n.Name, err)
		return
	}
	r = n.ssh(ctx, u, "exec "+c.remoteEnv()+" "+hold)
	last := strings.TrimSpace(r.stdout)
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	// ssh exits 255 when the remote command was killed by a signal
	s.logf("ssh-adopt: on %s in job %s, %d MiB without the interceptor: exit %d, last line %q", n.Name, id, 3*e.MiB, r.code, last)
}

// shortFlood sends SHORTs to a node's gpusliced as the hostile user,
// without a job, bounded in number.
func (s *soak) shortFlood(e soakEvent) {
	n := s.c.nodeByName(e.Node)
	gpus, err := n.gpus()
	if err != nil || len(gpus) == 0 {
		s.logf("short-flood on %s: no GPU list: %v", n.Name, err)
		return
	}
	cmd := n.onNode(s.hostile, s.helper, "-test.run=^$")
	cmd.Env = append(cmd.Env, "GPUSLICE_SOAK_ROLE=short-flood", "SOAK_SOCK="+s.c.ipcSock, "SOAK_GPU="+gpus[0].UUID,
		"SOAK_N="+strconv.Itoa(e.N))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := run(ctx, cmd)
	s.logf("short-flood on %s: %s", n.Name, strings.TrimSpace(r.stdout+r.stderr))
}

// pacedBypass: on the arena node, a filler takes one GPU whole, an honest
// neighbour of weight 90 launches back to back on the other, and the
// hostile job of weight Pct launches past the gate (the driver's entry
// point by address) paced at one 2 ms kernel every Pace ms. Its part of
// the GPU's time over a minute is measured (hostileShare).
func (s *soak) pacedBypass(e soakEvent) {
	one, two := s.honest[0], s.honest[1]
	arena := "--partition=arena"
	filler := s.sbatch(one, "arena-filler", fmt.Sprintf("#!/bin/sh\nexec sleep %d\n", e.Secs+60), "--gpu-mem=16G", arena)
	fair := s.sbatch(two, "arena-fair", fmt.Sprintf("#!/bin/sh\ntimeout %d %s 2 32\nexit 0\n", e.Secs+30, s.launcher()),
		"--gpu-mem=15G", "--gpu-compute=90", arena)
	cheat := s.sbatch(s.hostile, e.What, fmt.Sprintf("#!/bin/sh\nFC_LAUNCH_DIRECT=1 FC_LAUNCH_PACE_MS=%d timeout %d %s 2 32\nexit 0\n",
		e.Pace, e.Secs, s.launcher()), "--gpu-mem=512M", fmt.Sprintf("--gpu-compute=%d", e.Pct), arena)
	defer func() {
		for _, id := range []string{filler, fair, cheat} {
			if id != "" {
				_ = s.c.cmd(nil, "scancel", id).Run()
			}
		}
	}()
	if filler == "" || fair == "" || cheat == "" {
		return
	}
	n := s.c.nodeByName(arenaNode)
	var gpu int
	err := waitFor(5*time.Minute, func() error {
		cs, err := n.session(cheat)
		if err != nil {
			return err
		}
		fs, err := n.session(fair)
		if err != nil {
			return err
		}
		if len(cs.GPUs) == 0 || len(fs.GPUs) == 0 || cs.GPUs[0].UUID != fs.GPUs[0].UUID {
			return fmt.Errorf("jobs %s and %s not on one GPU", cheat, fair)
		}
		if len(cs.Processes) == 0 || len(fs.Processes) == 0 {
			return fmt.Errorf("jobs %s and %s not both launching", cheat, fair)
		}
		gpu = cs.GPUs[0].Index
		return nil
	})
	if err != nil {
		s.logf("paced-bypass: not measured: %v", err)
		s.inv.note("hostile-gpu-time", "not measured: "+err.Error())
		return
	}
	time.Sleep(5 * time.Second) // the controller sees both
	s.hostileShare(n, gpu, cheat, fair, e)
}
