package realgpu

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const h100 = `"versions":{"gpu":"NVIDIA H100 80GB HBM3","gpu_memory_bytes":85520809984,"driver":"580.65.06","cuda_driver":"13.0","fakecuda":false,"frameworks":{"torch":"2.11.0+cu130"},"context_cost_nvml_bytes":524288000},"run":{"started":"2026-12-01T10:00:00Z"}`

func line(name, verdict, extra string) string {
	return `{"name":"` + name + `","proves":"p","verdict":"` + verdict + `"` + extra + `,` + h100 + "}\n"
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		err      string
	}{
		{name: "cases", in: line("a", "pass", `,"figures":{"x":1}`) + "\n" + line("b", "skip", `,"reason":"torch not installed"`), n: 2},
		{name: "empty", in: "\n", err: "no results"},
		{name: "not JSON", in: "name=a\n", err: "line 1"},
		{name: "no name", in: `{"verdict":"pass"}` + "\n", err: "no case name"},
		{name: "odd verdict", in: line("a", "ok", ""), err: `verdict "ok"`},
		{name: "skip without reason", in: line("a", "skip", ""), err: "without its reason"},
		{name: "fail without failures", in: line("a", "fail", ""), err: "without what failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != tc.n {
				t.Fatalf("got %d records, %v; want %d", len(got), err, tc.n)
			}
		})
	}
}

func TestRenderRefusesFakecuda(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"flag", strings.Replace(line("a", "pass", ""), `"fakecuda":false`, `"fakecuda":true`, 1)},
		{"name", strings.Replace(line("a", "pass", ""), "NVIDIA H100 80GB HBM3", "NVIDIA fakecuda GPU 80 GiB", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := Parse(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := Render(&b, recs, time.Now()); !errors.Is(err, ErrFakecuda) {
				t.Fatalf("Render: %v, want ErrFakecuda", err)
			}
			if b.Len() != 0 {
				t.Fatalf("wrote %d bytes for a fakecuda run", b.Len())
			}
		})
	}
}

func TestCheckOneMachineAndBuild(t *testing.T) {
	for _, tc := range []struct{ name, in, err string }{
		{"driver", line("a", "pass", "") + strings.Replace(line("b", "pass", ""), "580.65.06", "575.1", 1), "the driver differs"},
		{"build", line("a", "pass", "") + strings.Replace(line("b", "pass", ""), `"fakecuda":false`, `"fakecuda":false,"gpuslice":"0.2"`, 1), "gpuslice's version differs"},
		{"bundle", line("a", "pass", "") + strings.Replace(line("b", "pass", ""), `"fakecuda":false`, `"fakecuda":false,"bundle":"sha256:1"`, 1), "the bundle"},
		{"twice", line("a", "pass", "") + line("a", "fail", `,"failures":["x"]`), "given twice"},
		{"no driver", strings.Replace(line("a", "pass", ""), `"driver":"580.65.06",`, "", 1), "driver version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := Parse(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if err := Check(recs); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Check: %v, want %q", err, tc.err)
			}
		})
	}
}

// A second run (run.sh --rest) completes the cases the first run's budget
// cut: its lines replace theirs in place, the first run's others stay.
func TestMergeRuns(t *testing.T) {
	second := func(s string) string {
		return strings.Replace(s, "2026-12-01T10:00:00Z", "2026-12-01T10:08:00Z", 1)
	}
	first, err := Parse(strings.NewReader(line("a", "pass", "") +
		line("b", "fail", `,"failures":["not run: the suite's budget of 345 s was spent"],"cut":true`) +
		line("c", "fail", `,"failures":["did not finish within 20 s"],"cut":true`)))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := Parse(strings.NewReader(second(line("b", "pass", "")) + second(line("c", "skip", `,"reason":"jax not installed"`))))
	if err != nil {
		t.Fatal(err)
	}
	recs := Merge(first, rest)
	var got []string
	for _, r := range recs {
		got = append(got, r.Name+":"+r.Verdict)
	}
	if strings.Join(got, " ") != "a:pass b:pass c:skip" {
		t.Fatalf("merged %v, want a:pass b:pass c:skip", got)
	}
	out := renderPage(t, recs)
	pageHas(t, out,
		"Runs of 2026-12-01 10:00 UTC, 2026-12-01 10:08 UTC on **NVIDIA H100 80GB HBM3**",
		"- from the run of 2026-12-01 10:08 UTC (`run.sh --rest`: what an earlier run's budget cut): b, c\n",
		"**2 pass, 0 fail, 1 skip.**",
		"pass: p (0.0 s; run of 2026-12-01 10:00 UTC).",
		"pass: p (0.0 s; run of 2026-12-01 10:08 UTC).",
	)
	if strings.Contains(out, "budget of 345 s") {
		t.Errorf("the page keeps a line the second run replaced:\n%s", out)
	}

	// A second run of another build is refused, not mixed in.
	other, _ := Parse(strings.NewReader(second(strings.Replace(line("b", "pass", ""), "580.65.06", "580.95.05", 1))))
	if err := Check(Merge(first, other)); err == nil || !strings.Contains(err.Error(), "driver differs") {
		t.Fatalf("Check of runs on two drivers: %v", err)
	}
}

func TestRender(t *testing.T) {
	in := line("cost_alloc_free_pair", "pass", `,"figures":{"added_percent":0.4,"throughput_ratio_8threads":0.97}`) +
		line("pytorch_caching_allocator_oom", "fail", `,"failures":["with: a | b","second"]`) +
		line("jax_prealloc_and_oom", "skip", `,"reason":"jax not installed"`)
	recs, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	out := renderPage(t, recs)
	pageHas(t, out,
		"Run of 2026-12-01 10:00 UTC on **NVIDIA H100 80GB HBM3** (79.6 GiB), NVIDIA driver 580.65.06, CUDA 13.0; generated 2026-12-02",
		"frameworks: torch 2.11.0+cu130",
		"a CUDA context costs 500 MiB by NVML's per-process figure, not measured by gpusliced's context probe",
		"**1 pass, 1 fail, 1 skip.**",
		`| [pytorch_caching_allocator_oom](#pytorch_caching_allocator_oom) | fail | p | with: a \| b (+1 more) |`,
		"| [jax_prealloc_and_oom](#jax_prealloc_and_oom) | skip | p | jax not installed |",
		"| added cost of an alloc+free pair (1 MiB, 1 thread) | 0.4% | ≤ 1% | meets |",
		"| 8-thread alloc/free throughput, with / without | 0.97 | ≥ 0.99 | **misses** |",
		"\"added_percent\": 0.4",
	)
}

// renderPage is recs's page, generated on a fixed day.
func renderPage(t *testing.T, recs []Record) string {
	t.Helper()
	var b strings.Builder
	if err := Render(&b, recs, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// pageHas checks that page holds each of wants.
func pageHas(t *testing.T, page string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}
