// Package monitoring checks the shipped dashboard and alerting rules
// (etc/monitoring) against a live gpusliced: Debian's prometheus scrapes a
// real daemon on loopback while real processes (fakecuda, interceptor
// preloaded) allocate, get denied and exit without freeing; then every
// dashboard panel's query is evaluated through Prometheus's HTTP API and
// must return data, and every alerting rule must load and evaluate.
//
// Run by `make test-monitoring` (GPUSLICE_BUILD_DIR = the build directory).
package monitoring

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// prom is a running prometheus.
type prom struct {
	t    *testing.T
	addr string
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startPrometheus runs Debian's prometheus scraping target every second
// with the shipped alerting rules loaded.
func startPrometheus(t *testing.T, target, rules string) *prom {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is needed (Debian package prometheus; make deps installs it)")
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: gpuslice
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &prom{t: t, addr: freePort(t)}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+p.addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p.waitFor("prometheus ready", func() bool {
		resp, err := http.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// waitFor polls cond with a generous deadline (never a timing assertion:
// the deadline only bounds a broken run).
func (p *prom) waitFor(what string, cond func() bool) {
	p.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) value() float64 {
	f, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
	return f
}

// api GETs a Prometheus API path and decodes its data.
func (p *prom) api(path string, q url.Values, data any) error {
	resp, err := http.Get("http://" + p.addr + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %v: %s", path, err, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// query evaluates an instant query returning a vector.
func (p *prom) query(expr string) ([]sample, error) {
	var d struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s", d.ResultType)
	}
	return d.Result, nil
}

func (p *prom) sum(expr string) float64 {
	r, err := p.query(expr)
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	var s float64
	for _, x := range r {
		s += x.value()
	}
	return s
}

// runApp runs target_app in session id with the interceptor preloaded and
// returns once it printed a line containing until (it keeps running when
// it holds memory; cleanup kills it).
func runApp(t *testing.T, d *testenv.Daemon, id, until string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testenv.Artifact(t, "examples/target_app"), args...)
	cmd.Env = append(d.Env(), "GPUSLICE_SESSION="+id, "LD_PRELOAD="+testenv.Artifact(t, "lib/libgpuslice.so"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), until) {
			go io.Copy(io.Discard, out)
			return cmd
		}
	}
	cmd.Wait()
	t.Fatalf("target_app %v ended before printing %q:\n%s", args, until, strings.Join(seen, "\n"))
	return nil
}

// dashboard is the part of the Grafana JSON the test reads.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaVars stands in for what Grafana substitutes before sending a query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")

func TestDashboardAndAlertsAgainstLiveDaemon(t *testing.T) {
	root := testenv.RepoRoot(t)
	rules := filepath.Join(root, "etc", "monitoring", "gpuslice-alerts.yml")
	raw, err := os.ReadFile(filepath.Join(root, "etc", "monitoring", "gpuslice-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}

	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB", Listen: true})
	p := startPrometheus(t, d.Listen, rules)
	p.waitFor("the first scrape of gpusliced", func() bool {
		r, err := p.query(`up{job="gpuslice"} == 1`)
		return err == nil && len(r) == 1
	})

	// Load: sessions, attached processes, denials, an admission refusal,
	// a process that exits without freeing (reclaim), releases.
	ctx := context.Background()
	c := d.Client()
	for _, r := range []client.SessionRequest{
		{ID: "101", UID: 0, QuotaBytes: 2 << 30},
		{ID: "102", UID: 0, QuotaBytes: 4 << 30, GPUs: []string{"1"}},
		{ID: "103", UID: 0, QuotaBytes: 1 << 30, GPUs: []string{"0"}},
	} {
		if _, err := c.CreateSession(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateSession(ctx, client.SessionRequest{ID: "104", QuotaBytes: 15 << 30}); err == nil {
		t.Fatal("a session over the GPUs' free capacity was admitted")
	}
	runApp(t, d, "101", "when=held", "--api", "driver", "--step", "512M", "--count", "6", "--hold", "300")
	runApp(t, d, "102", "when=held", "--api", "runtime", "--device", "0", "--step", "1G", "--until-denied", "--count", "8", "--hold", "300")
	leaver := runApp(t, d, "103", "status=without_free", "--step", "256M", "--count", "2", "--exit-without-free")
	leaver.Wait()
	if _, err := c.DeleteSession(ctx, "103"); err != nil {
		t.Fatal(err)
	}

	load := map[string]float64{"gpuslice_allocation_denials_total": 1, "gpuslice_reclaims_total": 1,
		"gpuslice_sessions_released_total": 1, "gpuslice_admission_refusals_total": 1, "gpuslice_attached_processes": 2}
	got, last := map[string]float64{}, ""
	p.waitFor(fmt.Sprintf("the load in Prometheus (want at least %v)", load), func() bool {
		ok := true
		for m, min := range load {
			got[m] = p.sum(m)
			ok = ok && got[m] >= min
		}
		if now := fmt.Sprint(got); !ok && now != last {
			t.Logf("so far: %s", now)
			last = now
		}
		return ok
	})
	// Two more scrapes, so rates over the window see the change.
	n := p.sum(`count_over_time(up{job="gpuslice"}[10m])`)
	p.waitFor("two more scrapes", func() bool { return p.sum(`count_over_time(up{job="gpuslice"}[10m])`) >= n+2 })

	t.Run("template variable", func(t *testing.T) {
		var vals []string
		if err := p.api("/api/v1/label/instance/values", url.Values{"match[]": {"gpuslice_build_info"}}, &vals); err != nil {
			t.Fatal(err)
		}
		if len(vals) != 1 || vals[0] != d.Listen {
			t.Fatalf("label_values(gpuslice_build_info, instance) = %v, want [%s]", vals, d.Listen)
		}
	})

	// Panels whose figures the load above must have moved off zero.
	nonZero := map[string]bool{
		"Attached processes": true, "Live sessions": true, "Allocations denied by quota": true,
		"Admission refusals": true, "Reclaimed memory": true, "Sessions created and released": true,
		"GPU memory: capacity, committed, used": true, "Used / capacity": true,
	}
	queries := 0
	for _, panel := range dash.Panels {
		if panel.Type == "row" {
			continue
		}
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for i, tg := range panel.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			t.Run(fmt.Sprintf("%s/%c", panel.Title, 'A'+i), func(t *testing.T) {
				queries++
				if strings.Contains(expr, "$") {
					t.Fatalf("query %q uses a variable the test does not know", tg.Expr)
				}
				r, err := p.query(expr)
				if err != nil {
					t.Fatalf("%s: %v", expr, err)
				}
				if len(r) == 0 {
					t.Fatalf("%s returned no data", expr)
				}
				if nonZero[panel.Title] {
					var s float64
					for _, x := range r {
						s += x.value()
					}
					if s <= 0 {
						t.Fatalf("%s = %v, want more than 0 under the load", expr, r)
					}
				}
			})
		}
	}
	if queries < 15 {
		t.Errorf("only %d panel queries evaluated", queries)
	}

	t.Run("alerting rules load and evaluate", func(t *testing.T) {
		var d struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
					Type      string `json:"type"`
				} `json:"rules"`
			} `json:"groups"`
		}
		want := map[string]bool{"GPUSliceDaemonDown": true, "GPUSliceGPUCommittedNearCapacity": true,
			"GPUSliceAllocationDenialsRising": true, "GPUSliceAdmissionRefusals": true,
			"GPUSliceAuditOverruns": true, "GPUSliceReclaimFailures": true}
		p.waitFor("every rule evaluated", func() bool {
			if err := p.api("/api/v1/rules", url.Values{"type": {"alert"}}, &d); err != nil {
				return false
			}
			for _, g := range d.Groups {
				for _, r := range g.Rules {
					if r.Health != "ok" {
						return false
					}
				}
			}
			return true
		})
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				if r.Health != "ok" {
					t.Errorf("rule %s: health %s (%s)", r.Name, r.Health, r.LastError)
				}
				delete(want, r.Name)
			}
		}
		if len(want) != 0 {
			t.Errorf("rules not loaded: %v", want)
		}
		// The refusal above fires GPUSliceAdmissionRefusals (no "for").
		p.waitFor("GPUSliceAdmissionRefusals firing", func() bool {
			r, err := p.query(`ALERTS{alertname="GPUSliceAdmissionRefusals", alertstate="firing"}`)
			return err == nil && len(r) == 1
		})
	})
}
