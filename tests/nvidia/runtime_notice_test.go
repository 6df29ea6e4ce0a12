package nvidia

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// rtRefusalLine is the interceptor's refusal line (docs/interceptor.md
// "When the quota refuses").
var rtRefusalLine = regexp.MustCompile(`^gpuslice: (job|session) (\S+): an allocation of (\S+) on GPU (\d+) was refused: ` +
	`the job holds (\S+) of its (\S+) quota on that GPU \(([^)]*)\)\. CUDA reports out of memory\. ` +
	`More: gpuslice status (\S+)( \(no more of these lines from this process\))?$`)

// NVIDIA's CUDA runtime refused past the quota (cudart_probe: cudaMalloc,
// cudaMallocPitch, cudaMallocManaged, cudaMallocAsync and cudaMallocArray,
// each once): the process's stderr says why, from the first refusal on,
// in at most a handful of lines, and the runtime still answers
// cudaErrorMemoryAllocation to each.
func TestRuntimeRefusalLine(t *testing.T) {
	probe := rtProbe(t, "cudart_probe")
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "80GiB"})
	r := rtGpuslice(t, d, nil, fmt.Sprintf("%dM", rtQuota/rtMiB), probe, fmt.Sprint(rtChunk))
	rtCheckLoaded(t, r)
	for _, k := range rtKinds {
		if got := r.get(k + "_second"); got != rtOOM {
			t.Errorf("%s past the quota gave %q, want %s (cudaErrorMemoryAllocation)", k, got, rtOOM)
		}
	}
	var lines []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 1 || len(lines) > 5 {
		t.Fatalf("%d refusals wrote %d stderr lines, want 1..5:\n%s", len(rtKinds), len(lines), r.stderr)
	}
	for _, l := range lines {
		if !rtRefusalLine.MatchString(l) {
			t.Fatalf("stderr line is not a refusal line: %q", l)
		}
	}
	// the first: cudaMalloc's second block, with the first one held
	m := rtRefusalLine.FindStringSubmatch(lines[0])
	chunk, quota := fmt.Sprintf("%dMiB", rtChunk/rtMiB), fmt.Sprintf("%dMiB", rtQuota/rtMiB)
	if m[3] != chunk || m[4] != "0" || m[5] != chunk || m[6] != quota {
		t.Errorf("first refusal line: asked %s on GPU %s, holds %s of %s; want %s on GPU 0, holds %s of %s\n%s",
			m[3], m[4], m[5], m[6], chunk, chunk, quota, lines[0])
	}
}
