package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gpuslice/gpuslice/internal/ipc"
)

// The IPC figures are ratios to a reference: a minimal Go unix-socket server
// (this binary run with -echo SOCKET, a process of its own like gpusliced)
// that answers each PING frame with a PONG, one goroutine per connection.
// Both servers are pinged in the same interleaved rounds, so what the
// machine's scheduler adds to either cancels in the ratio.

// echoServe serves PING -> PONG on sock until killed.
func echoServe(sock string) int {
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			buf := make([]byte, ipc.HeaderSize+ipc.MaxPayload)
			var out []byte
			for {
				_, p, err := ipc.ReadFrame(c, buf)
				if err != nil {
					return
				}
				out = ipc.AppendFrame(out[:0], ipc.TypePong, p)
				if _, err := c.Write(out); err != nil {
					return
				}
			}
		}()
	}
}

// echoProc is a running reference server.
type echoProc struct {
	sock string
	cmd  *exec.Cmd
}

func startEcho(dir string) (*echoProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e := &echoProc{sock: filepath.Join(dir, "echo.sock")}
	e.cmd = exec.Command(self, "-echo", e.sock)
	e.cmd.Stderr = os.Stderr
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start echo server: %w", err)
	}
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if c, err := dialRaw(e.sock); err == nil {
			c.close()
			return e, nil
		}
		if time.Since(start) > 10*time.Second {
			e.stop()
			return nil, fmt.Errorf("echo server did not start")
		}
	}
}

func (e *echoProc) stop() {
	e.cmd.Process.Kill()
	e.cmd.Wait()
	os.Remove(e.sock)
}

// ipcRatios pings gpusliced and the echo server in interleaved rounds
// (order alternating) and returns per-figure medians of the per-round
// ratios, plus the medians of the absolute figures.
func ipcRatios(o options, d *daemon, r *results) error {
	e, err := startEcho(d.dir)
	if err != nil {
		return err
	}
	defer e.stop()
	rounds := o.ipcRounds
	var seqR, seq99R, conR, con50R []float64
	var dSeq, eSeq, dCon, eCon []float64
	pid := map[string]int{d.ipcSock: d.cmd.Process.Pid, e.sock: e.cmd.Process.Pid}
	cpu := map[string]float64{} // server CPU seconds over the 32-client phases (both at once)
	for i := 0; i < rounds; i++ {
		socks := []string{d.ipcSock, e.sock}
		if i%2 == 1 {
			socks[0], socks[1] = socks[1], socks[0]
		}
		type fig struct{ p50, p99, c50, c99 float64 }
		got := map[string]fig{}
		for _, s := range socks {
			p50, p99, err := pingSequential(s, o.pings/rounds)
			if err != nil {
				return fmt.Errorf("ping %s: %w", s, err)
			}
			got[s] = fig{p50: p50, p99: p99}
		}
		var c0 [2]float64
		for k, s := range socks {
			if c0[k], err = cpuSeconds(pid[s]); err != nil {
				return err
			}
		}
		con, err := pingPaired(socks[0], socks[1], o.clients, o.pings/10/rounds)
		if err != nil {
			return fmt.Errorf("ping %s and %s (%d clients): %w", socks[0], socks[1], o.clients, err)
		}
		for k, s := range socks {
			c1, err := cpuSeconds(pid[s])
			if err != nil {
				return err
			}
			cpu[s] += c1 - c0[k]
			f := got[s]
			f.c50, f.c99 = con[k][0], con[k][1]
			got[s] = f
		}
		g, ref := got[d.ipcSock], got[e.sock]
		seqR = append(seqR, g.p50/ref.p50)
		seq99R = append(seq99R, g.p99/ref.p99)
		conR = append(conR, g.c99/ref.c99)
		con50R = append(con50R, g.c50/ref.c50)
		dSeq, eSeq = append(dSeq, g.p50), append(eSeq, ref.p50)
		dCon, eCon = append(dCon, g.c99), append(eCon, ref.c99)
	}
	// The same number of pings went to each: the ratio of CPU per ping.
	r.set("ipc_ping_cpu_32_ratio", cpu[d.ipcSock]/cpu[e.sock])
	r.set("ipc_ping_p50_ratio", median(seqR))
	r.set("ipc_ping_p99_ratio", median(seq99R))
	r.set("ipc_ping_p99_32_ratio", median(conR))
	r.set("ipc_ping_p50_32_ratio", median(con50R))
	r.set("ipc_ping_p50_us", median(dSeq))
	r.set("echo_ping_p50_us", median(eSeq))
	r.set("ipc_ping_p99_us_32clients", median(dCon))
	r.set("echo_ping_p99_us_32clients", median(eCon))
	return nil
}
