package slurm

// The soak's faults: daemons killed and restarted, slurmdbd away for
// minutes, a job's processes killed, gpusliced's state filesystem full, a
// node "rebooted". A node's clock is not stepped: CLOCK_REALTIME belongs
// to the whole machine (the suite's other lanes share it), and a time
// namespace offsets only CLOCK_MONOTONIC and CLOCK_BOOTTIME, and only for
// processes started in it, not the node's running daemons.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fault injects one fault of the schedule and undoes it after e.Secs.
func (s *soak) fault(e soakEvent) {
	c := s.c
	n := c.nodeByName(e.Node)
	s.inv.faultBegin(e.What, n.Name)
	defer s.inv.faultEnd(e.What, n.Name)
	down := time.Duration(e.Secs) * time.Second
	var err error
	switch e.What {
	case "gpusliced-kill":
		c.kill("gpusliced-"+n.Name, syscall.SIGKILL, 10*time.Second)
		time.Sleep(down)
		err = n.restartGpusliced()
	case "slurmd-restart":
		c.killOnly("slurmd-"+n.Name, syscall.SIGTERM, 20*time.Second)
		time.Sleep(down)
		err = s.startSlurmd(n)
	case "slurmctld-restart":
		c.killOnly("slurmctld", syscall.SIGTERM, 30*time.Second)
		time.Sleep(down)
		err = c.startSlurmctld()
	case "slurmdbd-stop":
		c.kill("slurmdbd", syscall.SIGTERM, 10*time.Second)
		time.Sleep(down)
		err = c.startSlurmdbd()
	case "job-kill":
		err = s.killJobProcesses(n)
	case "state-full":
		err = s.stateFull(n, down)
	case "node-reboot":
		err = s.reboot(n, down)
	case "clock-step":
		err = s.stepClock(n, e.N*e.Secs)
	}
	s.mu.Lock()
	s.faults[e.What]++
	s.mu.Unlock()
	if err != nil {
		s.inv.note("faults", fmt.Sprintf("%s on %s: %v", e.What, n.Name, err))
		s.logf("fault %s on %s: %v", e.What, n.Name, err)
		return
	}
	s.logf("fault %s on %s: over", e.What, n.Name)
}

// killOnly stops one daemon's own process (not its process group: what
// slurmd started, the jobs' slurmstepd, stays), SIGKILL after grace.
func (c *cluster) killOnly(name string, sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = syscall.Kill(p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (s *soak) startSlurmd(n *node) error {
	cmd := n.command("slurmd", append([]string{"-D", "-f", s.c.conf}, slurm.slurmdArgs(s.c.build)...)...)
	cmd.Env = n.slurmdEnv()
	return s.c.start("slurmd-"+n.Name, cmd)
}

// killJobProcesses kills -9 the processes of one job running on n (what
// the kernel's OOM killer or a user's kill does), the job's own: its
// users' processes in its cgroup, not slurmstepd.
func (s *soak) killJobProcesses(n *node) error {
	out, err := s.c.cmd(nil, "squeue", "-h", "-t", "R", "-w", n.Name, "-o", "%A").Output()
	if err != nil {
		return fmt.Errorf("squeue: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		s.logf("job-kill on %s: no job running there", n.Name)
		return nil
	}
	id := ids[len(ids)/2]
	pids := jobPids(id)
	killed := 0
	for _, pid := range pids {
		if uidOf(pid) != 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	s.logf("job-kill on %s: job %s, %d processes killed", n.Name, id, killed)
	return nil
}

// jobPids are the processes the kernel has in job id's cgroup (any node:
// a job id is the cluster's).
func jobPids(id string) []int {
	var pids []int
	want := []byte("/job_" + id + "/")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && bytes.Contains(b, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func uidOf(pid int) int {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/proc", strconv.Itoa(pid)), &st); err != nil {
		return -1
	}
	return int(st.Uid)
}

// stateFull fills the node's state tmpfs (gpusliced's database) for d,
// then frees it.
func (s *soak) stateFull(n *node, d time.Duration) error {
	filler := filepath.Join(n.dir, "state", "soak-filler")
	out, _ := n.command("sh", "-c", "dd if=/dev/zero of="+filler+" bs=64k 2>&1 | tail -1; df -k "+filepath.Dir(filler)+" | tail -1").CombinedOutput()
	s.logf("state-full on %s: %s", n.Name, strings.TrimSpace(string(out)))
	time.Sleep(d)
	if out, err := n.command("rm", "-f", filler).CombinedOutput(); err != nil {
		return fmt.Errorf("rm %s: %v: %s", filler, err, out)
	}
	return nil
}

// stepClock steps node n's wall clock by secs, as NTP or `date -s` does,
// for good: the clock NVML stamps its utilisation samples with (fakecuda's
// fc_clockstep; one kernel serves every node, so the kernel's clock stays,
// and gpusliced times itself with Go's monotonic clock, which no step
// moves). A step back left a GPU's shares unheld for as long as the step
// (TestSharesHoldThroughClockStep).
func (s *soak) stepClock(n *node, secs int) error {
	out, err := n.onNode(nil, filepath.Join(s.c.build, "tests", "fakecuda", "fc_clockstep"), strconv.Itoa(secs)).CombinedOutput()
	s.logf("clock-step on %s by %d s: %s", n.Name, secs, strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("fc_clockstep %d: %v: %s", secs, err, out)
	}
	return nil
}

// reboot "reboots" node n: everything on it is killed (its daemons and
// every job process, whatever its state), its tmpfs (gpusliced's runtime
// directory, /dev/shm with the GPUs' state) emptied; after d its munged,
// gpusliced, sshd and slurmd start again. Its namespaces and disk (the state
// directory) stay.
func (s *soak) reboot(n *node, d time.Duration) error {
	c := s.c
	for _, name := range []string{"slurmd-", "gpusliced-", "munged-"} {
		c.kill(name+n.Name, syscall.SIGKILL, 10*time.Second)
	}
	if n.cg == "" {
		return fmt.Errorf("the cluster runs without cgroups: no node to reboot")
	}
	for try := 0; try < 20; try++ {
		left := 0
		_ = filepath.WalkDir(n.cg, func(p string, de os.DirEntry, err error) error {
			if err != nil || !de.IsDir() || p == filepath.Join(n.cg, nodeHolderCgroup) {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != n.holder {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					left++
				}
			}
			return nil
		})
		if left == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A boot starts with no cgroups: the jobs' directories go (deepest
	// first), frozen or not.
	var dirs []string
	_ = filepath.WalkDir(filepath.Join(n.cg, "system.slice"), func(p string, de os.DirEntry, err error) error {
		if err == nil && de.IsDir() && strings.Contains(p, "/job_") {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
	ents, _ := os.ReadDir(filepath.Join(n.dir, "run"))
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(n.dir, "run", e.Name()))
	}
	if out, err := n.command("sh", "-c", "rm -rf /dev/shm/* /dev/shm/.[!.]*").CombinedOutput(); err != nil {
		return fmt.Errorf("empty /dev/shm: %v: %s", err, out)
	}
	time.Sleep(d)
	if nodeMunge() {
		if err := n.startMunge(); err != nil {
			return err
		}
	}
	if err := n.restartGpusliced(); err != nil {
		return err
	}
	if c.opts.Ssh {
		c.kill("sshd-"+n.Name, syscall.SIGKILL, time.Second) // gone with the rest
		if err := n.startSshd(); err != nil {
			return err
		}
	}
	return s.startSlurmd(n)
}
