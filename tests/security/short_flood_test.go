package security

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/ipc"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// The attacker's side runs as another user: the test binary started with
// SECURITY_ROLE=short-flood (init runs before TestMain).
func init() {
	if os.Getenv("SECURITY_ROLE") == "short-flood" {
		n, _ := strconv.Atoi(os.Getenv("SECURITY_N"))
		os.Exit(shortFlood(os.Getenv("SECURITY_SOCK"), os.Getenv("SECURITY_GPU"), n))
	}
}

// shortFlood sends n SHORTs for the GPU uuid on one connection, then n/10
// more each on a connection of its own (as the interceptor sends them),
// and prints "done sent=<n> ok=<answered OK> refused=<answered ERROR>".
func shortFlood(sock, uuid string, n int) int {
	var sent, ok, refused int
	one := func(c *ipc.Conn) error {
		sent++
		err := c.Short(uuid)
		var re *ipc.RemoteError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &re):
			refused++
		default:
			return err
		}
		return nil
	}
	c, err := ipc.Dial(sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; i < n; i++ {
		if err := one(c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	c.Close()
	for i := 0; i < n/10; i++ {
		c, err := ipc.Dial(sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		err = one(c)
		c.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Printf("done sent=%d ok=%d refused=%d\n", sent, ok, refused)
	return 0
}

// A local user with no job sends SHORT (what a job's interceptor sends
// when the driver refuses it memory its quota allowed) in a loop, as fast
// as gpusliced answers, while another user's job keeps a process on the
// GPU. Each SHORT made the audit pass out of turn, whoever sent it: the
// flood multiplied the audit's passes (and their cost, which grows with
// the processes on the GPU). The audit must keep to its configured rate:
// with an interval of an hour, not one pass during the flood. A SHORT
// from a process attached to the job still makes a pass.
func TestShortFloodWithoutJob(t *testing.T) {
	needRoot(t)
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Listen: true, RecoveryInterval: 100 * time.Millisecond,
		ExtraArgs: []string{"--audit-interval", "1h"}})
	uuid := firstUUID(t, d)
	id := session(t, d, "", uidOf(t, "gsltest2"), 512*MiB).ID
	job := startCmd(t, asUser(t, "gsltest2", probeCmd(t, "dev:0", "alloc:64M", "pause")), jobEnv(t, d, id))
	job.Expect("paused")

	passes := func() int {
		v := metric(t, d, `gpuslice_audit_passes_total{result="ok"}`)
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("gpuslice_audit_passes_total{result=\"ok\"} = %q: %v", v, err)
		}
		return n
	}
	before := passes()
	flood := startRole(t, asUser(t, "gsltest1", exec.Command(publicCopyOfSelf(t))),
		[]string{"SECURITY_ROLE=short-flood", "SECURITY_SOCK=" + d.IPCSock, "SECURITY_GPU=" + uuid, "SECURITY_N=2000"})
	done := flood.Expect("done")
	if err := flood.Wait(); err != nil {
		t.Fatalf("the flooding process: %v\n%s", err, flood.Output())
	}
	after := passes()
	t.Logf("a user with no job sent %s SHORTs (answered OK: %s, refused: %s); audit passes %d -> %d",
		done.Get("sent"), done.Get("ok"), done.Get("refused"), before, after)
	if after != before {
		t.Errorf("%s SHORTs from a user with no job made %d audit passes; with an audit interval of 1h there must be none",
			done.Get("sent"), after-before)
	}
	if !d.Running() {
		t.Fatal("gpusliced died")
	}

	// The job's own process is still heard: this test process, attached
	// to the job's session, says SHORT once.
	attachTo(t, d, id)
	c, err := ipc.Dial(d.IPCSock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Short(uuid); err != nil {
		t.Fatalf("SHORT from a process attached to the job: %v", err)
	}
	probe.Eventually(t, 10*time.Second, "an audit pass after the attached process's SHORT", func() (bool, string) {
		n := passes()
		return n > after, fmt.Sprintf("passes %d", n)
	})
	job.Send("")
	job.Wait()
}
