package slurm

// The soak (make soak, issue 60): a cluster of four nodes of two fake
// GPUs each, with slurmdbd and MariaDB and cgroup v2, runs a seeded
// schedule (soak_schedule_test.go) of two honest users' jobs, a hostile
// user's attacks (soak_workload_test.go) and faults (soak_faults_test.go)
// for GPUSLICE_SOAK_DURATION, while its invariants are checked every
// second and at the end (soak_checks_test.go). The report, one line per
// invariant with its checks and violations, goes to the test log and to
// GPUSLICE_SOAK_REPORT. The soak runs only when GPUSLICE_SOAK_DURATION is
// set, on a cluster and network of its own (TestMain), so it may run
// beside the suite's lanes.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// soakNet is what the soak owns on the machine (hostNet): the suite's
// runs have gs8, gs13, gs<release>.
var soakNet = hostNet{tag: "gsk", subnet: "10.86.0", lock: "/run/gpuslice-gsk-soak.lock", tmp: "gpuslice-soak-"}

func soakWanted() bool { return os.Getenv("GPUSLICE_SOAK_DURATION") != "" }

// soakOptions: four nodes of 2 x 16 GiB; tn2's driver has NVML's memory
// limits; a 16 MiB tmpfs holds each gpusliced's state (the state-full
// fault fills it); sshd with pam_slurm_adopt on each node where the
// release has it (the ssh-adopt attack).
func soakOptions() ClusterOptions {
	o := ClusterOptions{PlugstackArgs: "max=" + maxQuota, StateTmpfs: "16m", Ssh: sshWhy() == ""}
	for i, name := range soakNodes {
		o.Nodes = append(o.Nodes, NodeSpec{Name: name, Addr: nodeAddr(i), Devices: "2x16GiB", CPUs: 24, DriverLimits: name == "tn2"})
	}
	last := len(soakNodes) - 1
	o.Partitions = []string{
		"PartitionName=gpu Nodes=" + joinNames(soakNodes[:last]) + " Default=YES MaxTime=10 State=UP",
		"PartitionName=arena Nodes=" + soakNodes[last] + " MaxTime=10 State=UP",
	}
	return o
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s
}

// soak is one run.
type soak struct {
	c        *cluster
	t        *testing.T
	seed     int64
	d        time.Duration
	start    time.Time
	honest   []*testUser
	hostile  *testUser
	helper   string // this test binary, where every user can run it
	log      io.Writer
	mu       sync.Mutex
	jobs     map[string]*soakJob // by job id
	faults   map[string]int      // done, by kind
	attacks  map[string]int      // done, by kind
	submitFa map[string]int      // submissions refused, by kind
	busy     map[string]time.Time
	inv      *invariants
	wg       sync.WaitGroup
	app      *slurmApptainer // nil: no Apptainer here (appWhy)
	appWhy   string
}

// soakJob is a job the soak submitted.
type soakJob struct {
	id      string
	kind    string // the schedule's What
	user    string
	hostile bool
}

func TestSoak(t *testing.T) {
	if !soakWanted() {
		t.Skip("GPUSLICE_SOAK_DURATION is not set (make soak)")
	}
	c := needCluster(t)
	d, err := time.ParseDuration(os.Getenv("GPUSLICE_SOAK_DURATION"))
	if err != nil {
		t.Fatalf("GPUSLICE_SOAK_DURATION: %v", err)
	}
	seed := int64(1)
	if v := os.Getenv("GPUSLICE_SOAK_SEED"); v != "" {
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("GPUSLICE_SOAK_SEED: %v", err)
		}
	}
	s := &soak{c: c, t: t, seed: seed, d: d, jobs: map[string]*soakJob{}, faults: map[string]int{},
		attacks: map[string]int{}, submitFa: map[string]int{}, busy: map[string]time.Time{}}
	for _, n := range []string{testenv.TestUser1, testenv.TestUser2} {
		s.honest = append(s.honest, c.users[n])
	}
	if s.hostile, err = c.addUser(testenv.TestUser3); err != nil {
		t.Fatal(err)
	}
	if s.helper, err = s.copyHelper(); err != nil {
		t.Fatal(err)
	}
	s.app, s.appWhy = soakApptainer(t, c)
	logPath := c.path("log", "soak.log")
	if p := os.Getenv("GPUSLICE_SOAK_REPORT"); p != "" {
		logPath = p + ".log"
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	s.log = logFile
	evs := soakSchedule(seed, d, []string{testenv.TestUser1, testenv.TestUser2}, testenv.TestUser3)
	hash := scheduleHash(evs)
	s.logf("seed %d, %v, Slurm %s, schedule %s (%d entries)\n%s", seed, d, slurm.name, hash, len(evs), scheduleText(evs))
	t.Logf("soak: seed %d for %v on Slurm %s: schedule %s, %d entries", seed, d, slurm.name, hash, len(evs))

	s.inv = newInvariants(s)
	stop := make(chan struct{})
	checked := make(chan struct{})
	go func() { s.inv.loop(stop); close(checked) }()
	s.start = time.Now()
	for _, e := range evs {
		if w := time.Until(s.start.Add(e.At)); w > 0 {
			time.Sleep(w)
		}
		s.logf("%s", e)
		e := e
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			switch e.Kind {
			case "job":
				s.submitHonest(e)
			case "attack":
				s.attack(e)
			case "fault":
				s.fault(e)
			}
		}()
	}
	if w := time.Until(s.start.Add(d)); w > 0 {
		time.Sleep(w)
	}
	s.logf("schedule done after %v; waiting for the jobs, attacks and faults to end", time.Since(s.start).Round(time.Second))
	s.wg.Wait()
	s.waitQueueEmpty(15 * time.Minute)
	close(stop)
	<-checked
	s.inv.final()
	report := s.report(hash, time.Since(s.start))
	t.Log("\n" + report)
	s.logf("\n%s", report)
	if p := os.Getenv("GPUSLICE_SOAK_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Errorf("report: %v", err)
		}
	}
	if v := s.inv.violations(); v > 0 {
		// The daemons' logs go with the cluster's directory: a copy
		// beside the soak's log tells what happened to each violation.
		kept := logPath + ".daemons"
		if out, err := exec.Command("cp", "-a", c.path("log"), kept).CombinedOutput(); err != nil {
			t.Logf("keeping the daemons' logs: %v: %s", err, out)
			kept = "(not kept)"
		}
		t.Errorf("%d invariant violations (the report above; the soak's log in %s, the daemons' in %s)", v, logPath, kept)
	}
}

// logf writes a line of the soak's log, stamped with the run's time.
func (s *soak) logf(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at time.Duration
	if !s.start.IsZero() {
		at = time.Since(s.start)
	}
	fmt.Fprintf(s.log, "[%7.1fs] %s\n", at.Seconds(), fmt.Sprintf(format, a...))
}

// copyHelper copies this test binary where the job users can run it (the
// SHORT flood is a role of it: soakRole).
func (s *soak) copyHelper() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	p := s.c.path("soak-helper")
	return p, os.WriteFile(p, b, 0o755)
}

// waitQueueEmpty waits until slurmctld has no job pending, running or
// completing, then cancels what is left.
func (s *soak) waitQueueEmpty(d time.Duration) {
	err := waitFor(d, func() error {
		out, err := s.c.cmd(nil, "squeue", "-h", "-o", "%A %T").Output()
		if err != nil {
			return err
		}
		if len(out) > 0 {
			return fmt.Errorf("queue not empty:\n%s", out)
		}
		return nil
	})
	if err != nil {
		s.logf("%v: cancelling what is left", err)
		_ = s.c.cmd(nil, "scancel", "--full").Run()
		_ = waitFor(2*time.Minute, func() error {
			out, _ := s.c.cmd(nil, "squeue", "-h", "-o", "%A").Output()
			if len(out) > 0 {
				return fmt.Errorf("still queued: %s", out)
			}
			return nil
		})
	}
}

// addJob records a submitted job.
func (s *soak) addJob(id, kind, user string, hostile bool) {
	s.mu.Lock()
	s.jobs[id] = &soakJob{id: id, kind: kind, user: user, hostile: hostile}
	s.mu.Unlock()
}

// job returns what the soak knows of a job id (an array task's own id is
// mapped to its array's entry by the checker).
func (s *soak) job(id string) *soakJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[id]
}
