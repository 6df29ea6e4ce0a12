package slurm

// The soak's faults in progress and the faults-recovered invariant: each
// fault's daemons back when it ends.

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// faultBegin and faultEnd mark a fault on node (cluster-wide faults: "*")
// in progress: what it breaks there is not held against gpuslice, and the
// bounds after it count from its end. At its end, the daemons the fault
// stopped must be back, unless another fault in progress holds them down
// (slurmctld restarted while slurmdbd is stopped for minutes: the
// restart answers for slurmctld only).
func (iv *invariants) faultBegin(kind, node string) {
	iv.mu.Lock()
	if kind != "job-kill" {
		for _, d := range faultDaemons(kind, node) {
			iv.holding[d]++
		}
	}
	iv.active[faultScope(kind, node)]++
	if movesGPUTime(kind) {
		iv.active[gpuTimeKey(node)]++
	}
	iv.mu.Unlock()
}

func (iv *invariants) faultEnd(kind, node string) {
	iv.mu.Lock()
	if kind != "job-kill" {
		for _, d := range faultDaemons(kind, node) {
			iv.holding[d]--
		}
	}
	scope := faultScope(kind, node)
	iv.active[scope]--
	iv.back[scope] = time.Now()
	if movesGPUTime(kind) {
		iv.active[gpuTimeKey(node)]--
		iv.back[gpuTimeKey(node)] = iv.back[scope]
	}
	var check []string
	for _, d := range faultDaemons(kind, node) {
		if iv.holding[d] == 0 {
			check = append(check, d)
		}
	}
	iv.mu.Unlock()
	var down []string
	for _, d := range check {
		if !iv.running(d) {
			down = append(down, d)
		}
	}
	iv.check("faults-recovered", len(down) > 0, kind+" on "+scope+": not back: "+strings.Join(down, ", "))
}

// faultScope is where a fault acts: its node, or "*" for the cluster's
// daemons.
func faultScope(kind, node string) string {
	if kind == "slurmctld-restart" || kind == "slurmdbd-stop" {
		return "*"
	}
	return node
}

// movesGPUTime: a fault that changes how a node's GPU time is split
// between its jobs (the controller that holds a job to its share gone,
// or jobs' processes killed). The others leave the node's jobs and its
// gpusliced running: slurmctld, slurmdbd and slurmd restarted or stopped,
// the state directory full, the node's clock stepped (the share must hold
// through them).
func movesGPUTime(kind string) bool {
	return kind == "gpusliced-kill" || kind == "node-reboot" || kind == "job-kill"
}

// gpuTimeKey is the key of active and back for node's faults that move its
// GPU time.
func gpuTimeKey(node string) string { return "gpu-time:" + node }

// faultDaemons are the daemons a fault stops (a job's kill, none: its
// node's must still run after it).
func faultDaemons(kind, node string) []string {
	switch kind {
	case "slurmctld-restart":
		return []string{"slurmctld"}
	case "slurmdbd-stop":
		return []string{"slurmdbd"}
	case "gpusliced-kill", "state-full", "clock-step":
		return []string{"gpusliced-" + node}
	case "slurmd-restart":
		return []string{"slurmd-" + node}
	}
	return []string{"slurmd-" + node, "gpusliced-" + node} // node-reboot, job-kill
}

// faults-recovered holds a fault to the daemons it stopped, not to those
// another fault still holds down. The 2-hour run of seed 60 restarted
// slurmctld (3944 s, 2 s) while slurmdbd was stopped for 176 s (from
// 3893 s): slurmctld was back, slurmdbd rightly not, and the check of the
// restart's end counted a violation ("a daemon is not back").
func TestFaultRecoveredOverlap(t *testing.T) {
	var log bytes.Buffer
	iv := newInvariants(&soak{log: &log, start: time.Now()})
	up := map[string]bool{"slurmctld": true, "slurmdbd": true}
	for _, n := range []string{"tn1", "tn2"} {
		up["slurmd-"+n], up["gpusliced-"+n] = true, true
	}
	iv.running = func(name string) bool { return up[name] }
	want := 0
	step := func(what string) {
		t.Helper()
		if got := iv.c["faults-recovered"].violations; got != want {
			t.Fatalf("%s: %d violations, want %d (%s)", what, got, want, strings.TrimSpace(log.String()))
		}
	}

	// slurmdbd away for minutes; slurmctld restarted meanwhile, and back
	iv.faultBegin("slurmdbd-stop", "tn1")
	up["slurmdbd"] = false
	iv.faultBegin("slurmctld-restart", "tn1")
	iv.faultEnd("slurmctld-restart", "tn1")
	step("slurmctld back while slurmdbd is still stopped")
	up["slurmdbd"] = true
	iv.faultEnd("slurmdbd-stop", "tn1")
	step("slurmdbd back")

	// a node rebooted while its gpusliced was killed: the kill ends first
	iv.faultBegin("node-reboot", "tn2")
	up["slurmd-tn2"], up["gpusliced-tn2"] = false, false
	iv.faultBegin("gpusliced-kill", "tn2")
	iv.faultEnd("gpusliced-kill", "tn2")
	step("gpusliced's kill over while the node reboots")
	up["slurmd-tn2"], up["gpusliced-tn2"] = true, true
	iv.faultEnd("node-reboot", "tn2")
	step("the node back")

	// a daemon a fault stopped and did not bring back is a violation
	iv.faultBegin("slurmd-restart", "tn1")
	up["slurmd-tn1"] = false
	iv.faultEnd("slurmd-restart", "tn1")
	want = 1
	step("slurmd not back")
	up["slurmd-tn1"] = true
	iv.faultBegin("slurmctld-restart", "tn2")
	up["slurmctld"] = false
	iv.faultEnd("slurmctld-restart", "tn2")
	want = 2
	step("slurmctld not back")
}

// A minute of the paced bypass is its share's measure only while its
// neighbour competes: not when a fault that moves the node's GPU time came
// within it (the neighbour's processes killed, in seed 60's 2-hour run:
// 17.8 % "against a share of 3.2 %" on a GPU it then had to itself;
// gpusliced killed; the node rebooted), nor when the neighbour ended. The
// cluster's faults and the node's others leave both jobs and the
// controller running: those minutes count.
func TestHostileShareNeedsTheNeighbour(t *testing.T) {
	var log bytes.Buffer
	iv := newInvariants(&soak{log: &log, start: time.Now()})
	iv.running = func(string) bool { return true }
	from := time.Now()
	if why := iv.uncontended("tn4", from, true); why != "" {
		t.Fatalf("a quiet minute beside a running neighbour: %q", why)
	}
	if why := iv.uncontended("tn4", from, false); why == "" {
		t.Errorf("the neighbour gone: counted")
	}
	for _, kind := range []string{"job-kill", "gpusliced-kill", "node-reboot"} {
		from := time.Now()
		iv.faultBegin(kind, "tn4")
		if why := iv.uncontended("tn4", from, true); why == "" {
			t.Errorf("%s in progress on the node: counted", kind)
		}
		iv.faultEnd(kind, "tn4")
		if why := iv.uncontended("tn4", from, true); why == "" {
			t.Errorf("%s on the node within the minute: counted", kind)
		}
		if why := iv.uncontended("tn3", from, true); why != "" {
			t.Errorf("%s on another node: %q", kind, why)
		}
	}
	for _, f := range [][2]string{{"slurmctld-restart", "tn1"}, {"slurmdbd-stop", "tn1"}, {"slurmd-restart", "tn4"}, {"state-full", "tn4"}, {"clock-step", "tn4"}} {
		from := time.Now()
		iv.faultBegin(f[0], f[1])
		if why := iv.uncontended("tn4", from, true); why != "" {
			t.Errorf("%s in progress on %s: not counted: %q", f[0], f[1], why)
		}
		iv.faultEnd(f[0], f[1])
		if why := iv.uncontended("tn4", from, true); why != "" {
			t.Errorf("%s on %s within the minute: not counted: %q", f[0], f[1], why)
		}
	}
}
