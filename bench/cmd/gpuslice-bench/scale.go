package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"golang.org/x/sys/unix"
)

// scaleBench fills one daemon with o.scale sessions on 4 GPUs and reads
// what they cost: creation time near the end, the daemon's open fds and
// RSS, the ledgers' memory (allocated blocks of the memfds) and the time
// of one list of every session over the admin API.
func scaleBench(o options, r *results) error {
	d, err := startDaemon(o.build, "4x80GiB", true)
	if err != nil {
		return err
	}
	defer d.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	pid := d.cmd.Process.Pid
	n := o.scale
	fds0 := 0
	tail := min(200, n)
	lat := make([]float64, 0, tail)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		_, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: fmt.Sprintf("job-%d", 100000+i), UID: 1000, QuotaBytes: 4 << 20}) // 10,000 x 4 MiB fits 80 GiB
		if err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		if i >= n-tail {
			lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e6)
		}
		if i == min(99, n-1) { // the admin connection and the store are open by now
			if fds0, err = countFDs(pid); err != nil {
				return err
			}
		}
	}
	suffix := "10k"
	if n != 10000 {
		suffix = strconv.Itoa(n)
	}
	// Fds now, before the list and the scrape open their own connections.
	fds, err := countFDs(pid)
	if err != nil {
		return err
	}
	r.set("sessions_"+suffix+"_open_fds", float64(fds))
	r.set("sessions_"+suffix+"_fds_added", float64(fds-fds0)) // from session 100 on
	r.set("create_p50_ms_"+suffix, percentile(lat, 50))
	r.set("create_p99_ms_"+suffix, percentile(lat, 99))

	if v, err := statusMiB(pid, "RssAnon"); err == nil {
		r.set("sessions_"+suffix+"_rssanon_mib_before_list", v)
	}
	// List: the whole response over the admin socket, median of 9.
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", d.adminSock)
		}}}
	defer hc.CloseIdleConnections()
	var lists []float64
	var body int64
	for i := 0; i < 9; i++ {
		t0 := time.Now()
		resp, err := hc.Get("http://gpusliced/v1/sessions")
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		body, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("list: %s %v", resp.Status, err)
		}
		lists = append(lists, float64(time.Since(t0).Nanoseconds())/1e6)
	}
	r.set("list_"+suffix+"_ms", median(lists))
	r.set("list_"+suffix+"_bytes", float64(body))
	ss, err := d.cl.ListSessions(ctx)
	if err != nil {
		return err
	}
	if len(ss) != n || len(ss[0].GPUs) != 4 {
		return fmt.Errorf("expected %d sessions on 4 GPUs, got %d", n, len(ss))
	}
	if err := scrape(d.adminSock); err != nil {
		return err
	}
	rss, err := rssMiB(pid)
	if err != nil {
		return err
	}
	r.set("sessions_"+suffix+"_rss_mib", rss)
	for _, f := range []string{"RssAnon", "RssShmem"} {
		if v, err := statusMiB(pid, f); err == nil {
			r.set("sessions_"+suffix+"_"+strings.ToLower(f)+"_mib", v)
		}
	}

	// Ledger memory: the blocks the memfds really hold (the links in the
	// ledger directory open them; st_blocks counts 512-byte units).
	var blocks int64
	dir := filepath.Join(d.dir, "run", "ledgers")
	for i := 0; i < n; i++ {
		for _, kind := range []string{".limits", ".counters"} {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(dir, fmt.Sprintf("job-%d", 100000+i)+kind), &st); err != nil {
				return fmt.Errorf("stat ledger: %w", err)
			}
			blocks += st.Blocks
		}
	}
	r.set("ledger_bytes_per_idle_session", float64(blocks*512)/float64(n))
	return nil
}

func countFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}

func rssMiB(pid int) (float64, error) { return statusMiB(pid, "VmRSS") }

// statusMiB reads field (kB) of /proc/<pid>/status in MiB.
func statusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
