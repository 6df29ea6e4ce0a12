package daemon_test

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestMetricsScrape scrapes the TCP listener of a real daemon with a session
// and an attached process, lints the exposition with promlint and promtool.
func TestMetricsScrape(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Listen: true, Devices: "2x16GiB",
		ExtraEnv: []string{"GPUSLICE_METRICS_DEBUG=1"}})
	create(t, d, client.SessionRequest{ID: "m1", UID: 0, QuotaBytes: 4 * giB})
	c := mustChild(t, d, "m1", giB)
	_ = c
	if _, err := ipcPing(d.IPCSock); err != nil {
		t.Fatal(err)
	}
	scrape := func() []byte {
		resp, err := http.Get("http://" + d.Listen + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
		}
		return body
	}
	// A request is observed after its reply is written: wait for the ping.
	var body []byte
	waitFor(t, "ping observed", func() (bool, string) {
		body = scrape()
		return strings.Contains(string(body), `gpuslice_ipc_request_duration_seconds_count{type="ping"} 1`), ""
	})
	text := string(body)
	for _, want := range []string{
		`gpuslice_build_info{`,
		`gpuslice_gpu_capacity_bytes{gpu="0",uuid="GPU-`,
		`gpuslice_gpu_used_bytes{gpu="0",uuid="GPU-`,
		`gpuslice_attached_processes 1`,
		`gpuslice_sessions 1`,
		`gpuslice_ipc_request_duration_seconds_bucket{type="attach"`,
		`gpuslice_ipc_request_duration_seconds_count{type="ping"} 1`,
		`gpuslice_session_used_bytes{session="m1"`, // GPUSLICE_METRICS_DEBUG=1
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (make deps installs Debian's prometheus package): %v", err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	// /healthz on the TCP listener; the admin API is not served there.
	if r, err := http.Get("http://" + d.Listen + "/healthz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", r, err)
	}
	if r, err := http.Get("http://" + d.Listen + "/v1/sessions"); err != nil || r.StatusCode != 404 {
		t.Fatalf("/v1/sessions on the public listener: %v %v", r, err)
	}
}
