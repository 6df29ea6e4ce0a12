package nvidia

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const smiPath = "usr/lib/nvidia/current/nvidia-smi"

// nvidia-smi 535 (NVIDIA's binary from Debian's nvidia-smi package) runs on
// fakecuda's NVML: its default view, -L, --query-gpu, --query-compute-apps
// and -q show the node's devices, their memory and the processes holding it;
// inside a gpuslice session it shows the quota as the total and the
// session's usage.
func TestNvidiaSMI(t *testing.T) {
	root := toolsRoot(t)
	smi := toolsFile(t, root, smiPath)
	row := &toolsRow{Program: "nvidia-smi 535.261.03"}
	defer toolsRecord(t, row)

	row.Runs = t.Run("views", func(t *testing.T) { smiViews(t, smi) })
	row.QueriesShowQuota = t.Run("session", func(t *testing.T) { smiSession(t, smi) })
	row.Note = "default view, -L, --query-gpu, --query-compute-apps, -q; processes come from NVML's internal export table " +
		"(slots found by experiment); in a session total = quota, used = the session's bytes. " +
		"nvidia-smi allocates nothing, so there is no quota to enforce on it"
}

func smiViews(t *testing.T, smi string) {
	n := newToolsNode(t, "2x16GiB")
	lib := filepath.Join(n.build, "lib")
	holder := startToolsHolder(t, n.env(), 0, 1024*toolsMiB)
	pid := strconv.Itoa(holder.pid())

	// default view: the memory bar and the process row
	r := toolsExec(t, n.env(), smi).ok(t)
	toolsLoaded(t, r, lib, filepath.Join(lib, "libnvidia-ml.so.1"))
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`NVIDIA-SMI 535\.261\.03`),
		regexp.MustCompile(`(?s)NVIDIA fakecuda GPU 16 GiB.*\|\s+1024MiB / 16384MiB \|.*\|\s+0MiB / 16384MiB \|`),
	} {
		if !re.MatchString(r.stdout) {
			t.Errorf("nvidia-smi: no match for %s in:\n%s", re, r.stdout)
		}
	}
	procRow := regexp.MustCompile(`\|\s+0\s+N/A\s+N/A\s+` + pid + `\s+C\s+\S*target_app\s+1024MiB\s+\|`)
	if !procRow.MatchString(r.stdout) {
		t.Errorf("nvidia-smi: no process row for target_app (pid %s, 1024MiB on GPU 0) in:\n%s", pid, r.stdout)
	}

	// -L: both devices with their UUIDs
	r = toolsExec(t, n.env(), smi, "-L").ok(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	listRe := regexp.MustCompile(`^GPU (\d): NVIDIA fakecuda GPU 16 GiB \(UUID: (GPU-[0-9a-f-]{36})\)$`)
	uuids := map[string]bool{}
	for i, l := range lines {
		m := listRe.FindStringSubmatch(l)
		if m == nil || m[1] != strconv.Itoa(i) {
			t.Errorf("nvidia-smi -L line %d: %q", i, l)
			continue
		}
		uuids[m[2]] = true
	}
	if len(lines) != 2 || len(uuids) != 2 {
		t.Errorf("nvidia-smi -L: want 2 devices with distinct UUIDs:\n%s", r.stdout)
	}

	// --query-gpu: memory per device in CSV
	r = toolsExec(t, n.env(), smi, "--query-gpu=name,uuid,memory.total,memory.used,memory.free", "--format=csv").ok(t)
	csv := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(csv) != 3 || csv[0] != "name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB]" {
		t.Fatalf("nvidia-smi --query-gpu:\n%s", r.stdout)
	}
	for i, want := range []string{"16384 MiB, 1024 MiB, 15360 MiB", "16384 MiB, 0 MiB, 16384 MiB"} {
		f := strings.Split(csv[i+1], ", ")
		if len(f) != 5 || f[0] != "NVIDIA fakecuda GPU 16 GiB" || !uuids[f[1]] || strings.Join(f[2:], ", ") != want {
			t.Errorf("nvidia-smi --query-gpu device %d: %q, want memory %q", i, csv[i+1], want)
		}
	}

	// --query-compute-apps: the process, its bytes and its executable
	r = toolsExec(t, n.env(), smi, "--query-compute-apps=pid,used_memory,process_name", "--format=csv,noheader").ok(t)
	if app := strings.TrimSpace(r.stdout); !regexp.MustCompile(`^` + pid + `, 1024 MiB, \S*/target_app$`).MatchString(app) {
		t.Errorf("nvidia-smi --query-compute-apps: %q, want pid %s with 1024 MiB", app, pid)
	}

	// -q: the full report, with the FB memory section and the process
	r = toolsExec(t, n.env(), smi, "-q").ok(t)
	fb := regexp.MustCompile(`FB Memory Usage\s+Total\s+: 16384 MiB\s+Reserved\s+: 0 MiB\s+Used\s+: 1024 MiB\s+Free\s+: 15360 MiB`)
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`Attached GPUs\s+: 2\n`),
		fb,
		regexp.MustCompile(`Process ID\s+: ` + pid + `\s+Type\s+: C\s+Name\s+: \S*target_app\s+Used GPU Memory\s+: 1024 MiB`),
	} {
		if !re.MatchString(r.stdout) {
			t.Errorf("nvidia-smi -q: no match for %s in:\n%s", re, r.stdout)
		}
	}
}

// In a session under a 2 GiB quota, with 512 MiB held by a process of the
// session and 3 GiB by a process outside it, nvidia-smi shows total 2048 MiB
// and used 512 MiB (the interceptor answers nvmlDeviceGetMemoryInfo_v2, which
// nvidia-smi resolves with dlsym).
func smiSession(t *testing.T, smi string) {
	d := toolsDaemon(t, "16GiB")
	outside := startToolsHolder(t, d.Env(), 0, 3072*toolsMiB)
	defer outside.stop()

	app := filepath.Join(d.Build, "examples", "target_app")
	script := fmt.Sprintf(`out=$(mktemp)
%s --api driver --step 512MiB --count 1 --hold 60 > "$out" &
held=$!
trap 'kill -USR1 $held 2>/dev/null; wait $held; rm -f "$out"' EXIT
i=0
until grep -q '^event=hold' "$out"; do i=$((i+1)); [ $i -lt 600 ] || exit 9; sleep 0.05; done
%s --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader || exit
%s -q || exit
`, app, smi, smi)
	r := toolsInSession(t, d, "2G", nil, "/bin/sh", "-c", script).ok(t)
	lib := filepath.Join(d.Build, "lib")
	toolsLoaded(t, r, lib, filepath.Join(lib, "libnvidia-ml.so.1"), filepath.Join(lib, "libgpuslice.so"))
	first, _, _ := strings.Cut(r.stdout, "\n")
	if first != "2048 MiB, 512 MiB, 1536 MiB" {
		t.Errorf("nvidia-smi --query-gpu in the session: %q, want the quota (2048 MiB) and the session's 512 MiB\n%s",
			first, r.stdout)
	}
	fb := regexp.MustCompile(`FB Memory Usage\s+Total\s+: 2048 MiB\s+Reserved\s+: 0 MiB\s+Used\s+: 512 MiB\s+Free\s+: 1536 MiB`)
	if !fb.MatchString(r.stdout) {
		t.Errorf("nvidia-smi -q in the session: FB memory is not the quota's:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "16384 MiB") {
		t.Errorf("nvidia-smi in the session shows the physical 16384 MiB:\n%s", r.stdout)
	}
}
