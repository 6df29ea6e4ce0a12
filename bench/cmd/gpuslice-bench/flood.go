package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/ipc"
	"golang.org/x/sys/unix"
)

// floodKinds are the message floods measured, in this order in each
// round: PING on one connection and on a connection each; SHORT from a
// process attached to no session (a user with no job), on one connection
// and on a connection each (as the interceptor sends it); a malformed
// frame on a connection each (the daemon closes the connection after it);
// and SHORT from a process attached to the job's session. Each flood is
// sent by a process of its own (this binary run with -flood-send): an
// attached process stays attached until it exits.
var floodKinds = []string{"ping", "ping_conn", "short", "short_conn", "malformed", "short_attached"}

// floodBench measures gpusliced's CPU (percent of one core) and its audit
// passes per second while one process sends one kind of message at
// o.floodRate a second, for each kind of floodKinds in turn, in
// o.floodRounds interleaved rounds, on a daemon of its own with the
// default audit_interval and a job of o.floodProcs processes holding
// memory on the GPU (each pass lists and walks them). Each figure is the
// median over the rounds. Keys: flood_<kind>_cpu_pct,
// flood_<kind>_audit_passes_per_s, flood_<kind>_sent_per_s (the rate
// reached), and the differences the targets bound, each the median of a
// round's difference: flood_short_cpu_over_ping_points (short - ping),
// flood_short_conn_cpu_over_ping_points (short_conn - ping_conn),
// flood_malformed_cpu_over_ping_points (malformed - ping_conn),
// flood_short_attached_cpu_over_ping_points (short_attached - ping).
func floodBench(o options, r *results) error {
	d, err := startDaemon(o.build, "80GiB", true, "FAKECUDA_CTX_BYTES=0")
	if err != nil {
		return err
	}
	defer d.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const id = "bench-flood"
	if _, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: uint32(os.Getuid()), QuotaBytes: 64 << 30}); err != nil {
		return err
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	env := d.jobEnv(o, id)
	for i := 0; i < o.floodProcs; i++ {
		c, err := holder(o, env, "1MiB", 1)
		if err != nil {
			return err
		}
		cmds = append(cmds, c)
	}
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		s, err := d.cl.GetSession(ctx, id)
		if err == nil && len(s.Processes) == o.floodProcs && s.GPUs[0].UsedBytes >= uint64(o.floodProcs)<<20 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("%d processes did not all attach", o.floodProcs)
		}
	}
	gpus, err := d.cl.GPUs(ctx)
	if err != nil || len(gpus) == 0 {
		return fmt.Errorf("GPUs: %v", err)
	}
	r.set("flood_rate_per_s", float64(o.floodRate))
	r.set("flood_procs", float64(o.floodProcs))
	cpu, passes, sent := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	failed := map[string]error{}
	for round := 0; round < o.floodRounds; round++ {
		for _, kind := range floodKinds {
			if failed[kind] != nil {
				continue
			}
			c, p, n, err := flood(o, d, kind, id, gpus[0].UUID)
			if err != nil {
				failed[kind] = err
				continue
			}
			cpu[kind] = append(cpu[kind], c)
			passes[kind] = append(passes[kind], p)
			sent[kind] = append(sent[kind], n)
		}
	}
	for _, kind := range floodKinds {
		if err := failed[kind]; err != nil {
			r.fail("flood_"+kind+"_cpu_pct", err)
			continue
		}
		r.set("flood_"+kind+"_cpu_pct", median(cpu[kind]))
		r.set("flood_"+kind+"_audit_passes_per_s", median(passes[kind]))
		r.set("flood_"+kind+"_sent_per_s", median(sent[kind]))
	}
	for _, c := range [][2]string{{"short", "ping"}, {"short_conn", "ping_conn"}, {"malformed", "ping_conn"}, {"short_attached", "ping"}} {
		key := "flood_" + c[0] + "_cpu_over_ping_points"
		if failed[c[0]] != nil || failed[c[1]] != nil {
			r.fail(key, fmt.Errorf("flood of %s or %s not measured", c[0], c[1]))
			continue
		}
		diff := make([]float64, len(cpu[c[0]]))
		for i := range diff {
			diff[i] = cpu[c[0]][i] - cpu[c[1]][i]
		}
		r.set(key, median(diff))
	}
	return nil
}

// flood starts a sender of kind (-flood-send) and, over o.floodWindow
// after a quarter-second start, measures the daemon's CPU (percent of one
// core), its audit passes per second and the rate the sender reached.
func flood(o options, d *daemon, kind, session, uuid string) (cpuPct, passes, sent float64, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, 0, err
	}
	cmd := exec.Command(self, "-flood-send", kind, "-flood-sock", d.ipcSock, "-flood-session", session,
		"-flood-gpu", uuid, "-flood-rate", strconv.Itoa(o.floodRate))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, 0, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	out := bufio.NewScanner(outp)
	if !out.Scan() || out.Text() != "ready" {
		return 0, 0, 0, fmt.Errorf("flood sender %s did not start", kind)
	}
	time.Sleep(250 * time.Millisecond)
	p0, err := auditPasses(d.adminSock)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	perSec, err := cpuPerSecond(d.cmd.Process.Pid, o.floodWindow)
	el := time.Since(t0).Seconds()
	p1, perr := auditPasses(d.adminSock)
	if err == nil {
		err = perr
	}
	if err != nil {
		return 0, 0, 0, err
	}
	in.Close()
	if !out.Scan() {
		return 0, 0, 0, fmt.Errorf("flood sender %s failed", kind)
	}
	rate, err := strconv.ParseFloat(strings.TrimPrefix(out.Text(), "rate "), 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("flood sender %s: %q", kind, out.Text())
	}
	return perSec * 100, (p1 - p0) / el, rate, nil
}

// floodSend is the sender of one flood (-flood-send kind): it prints
// "ready", sends at rate a second until its stdin closes, then prints
// "rate <messages a second>" over the whole run.
func floodSend(kind, sock, session, uuid string, rate int) int {
	short := ipc.AppendRequest(nil, ipc.Request{Type: ipc.TypeShort, GPU: []byte(uuid)})
	ping := ipc.AppendFrame(nil, ipc.TypePing, []byte("ping"))
	bad := ipc.AppendFrame(nil, ipc.TypePing, []byte("ping"))
	bad[0] ^= 0xff // wrong magic
	var send func() error
	var err error
	switch kind {
	case "ping":
		send, err = oneConn(sock, ping)
	case "ping_conn":
		send = connEach(sock, ping)
	case "short":
		send, err = oneConn(sock, short)
	case "short_conn":
		send = connEach(sock, short)
	case "malformed":
		send = connEach(sock, bad)
	case "short_attached":
		var c *ipc.Conn
		if c, err = ipc.Dial(sock); err == nil {
			var a *ipc.Attachment
			if a, err = c.Attach(session, ""); err == nil {
				a.Close()
				send, err = oneConn(sock, short)
			}
		}
	default:
		err = fmt.Errorf("no flood %q", kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flood sender:", err)
		return 1
	}
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	fmt.Println("ready")
	lockThread()
	period := time.Second / time.Duration(rate)
	t0 := time.Now()
	n := 0
	for ; !stop.Load(); n++ {
		if wait := time.Until(t0.Add(time.Duration(n) * period)); wait > 0 {
			time.Sleep(wait)
		}
		if err := send(); err != nil {
			fmt.Fprintln(os.Stderr, "flood sender:", err)
			return 1
		}
	}
	fmt.Printf("rate %.1f\n", float64(n)/time.Since(t0).Seconds())
	return 0
}

// oneConn sends req and reads its answer, all on one connection.
func oneConn(sock string, req []byte) (func() error, error) {
	c, err := dialRaw(sock)
	if err != nil {
		return nil, err
	}
	return func() error { return roundTrip(c, req) }, nil
}

// connEach connects, sends req, reads the answer (and the end of the
// stream after a malformed frame) and closes, each time.
func connEach(sock string, req []byte) func() error {
	return func() error {
		c, err := dialRaw(sock)
		if err != nil {
			return err
		}
		defer c.close()
		return roundTrip(c, req)
	}
}

// roundTrip writes req and reads one whole frame back with blocking
// system calls.
func roundTrip(c *rawConn, req []byte) error {
	if _, err := unix.Write(c.fd, req); err != nil {
		return err
	}
	read := func(b []byte) error {
		for got := 0; got < len(b); {
			k, err := unix.Read(c.fd, b[got:])
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return err
			}
			if k == 0 {
				return errors.New("connection closed")
			}
			got += k
		}
		return nil
	}
	if err := read(c.buf[:ipc.HeaderSize]); err != nil {
		return err
	}
	h, err := ipc.ParseHeader(c.buf[:ipc.HeaderSize])
	if err != nil {
		return err
	}
	return read(c.buf[ipc.HeaderSize : ipc.HeaderSize+h.Length])
}

// auditPasses reads gpuslice_audit_passes_total (successful passes) from
// the admin socket's /metrics.
func auditPasses(sock string) (float64, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://gpusliced/metrics")
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	const series = `gpuslice_audit_passes_total{result="ok"} `
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metrics: no %s", strings.TrimSpace(series))
}
