package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/cli"
)

// fakeSacct writes a program that answers like sacct -n -P -X -o
// JobID,User,State,NodeList,AdminComment with lines, after checking it was
// asked for job id, and returns its path.
func fakeSacct(t *testing.T, id string, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sacct")
	script := "#!/bin/sh\n" +
		`case " $* " in *" -j ` + id + ` "*"-o JobID,User,State,NodeList,AdminComment "*) ;; *) echo "sacct: unexpected: $*" >&2; exit 1;; esac` + "\n" +
		"cat <<'EOF'\n" + strings.Join(lines, "\n") + "\nEOF\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func seff(t *testing.T, sacct string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(append([]string{"seff", "--sacct", sacct}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

const (
	uuidA = "gpu-0fb77ae2-cd90-4869-996b-d2ca1bdef09b"
	uuidB = "gpu-1a2b3c4d-cd90-4869-996b-d2ca1bdef09b"
)

// seff's human output: what Slurm users know from seff, for GPU memory.
func TestSeff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    string
		lines []string
		code  int
		want  []string
	}{
		{"one GPU, well below", "42", []string{
			"42|alice|COMPLETED|node01|gpuslice:node01/" + uuidA + "=quota_mib:8192,peak_mib:5222,denied:0"}, 0,
			[]string{"Job ID: 42\n", "User: alice\n", "State: COMPLETED\n", "Nodes: node01\n",
				"GPU memory asked: 8GiB per GPU (--gpu-mem)\n", "GPU memory peak: 5.1GiB\n",
				"GPU memory efficiency: 64% of 8GiB\n", "Allocations refused: 0\n",
				"GPU: GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b on node01\n",
				"Next time: --gpu-mem=6G would do (the peak plus a margin)\n"}},
		{"a comment from before nodes were named", "43", []string{
			"43|alice|COMPLETED|node01|gpuslice:" + uuidA + "=quota_mib:1024,peak_mib:900,denied:1"}, 0,
			[]string{"GPU memory peak: 900MiB\n", "GPU memory efficiency: 88% of 1GiB\n", "Allocations refused: 1\n",
				"GPU: GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b on -\n",
				"Next time: ask for more, e.g. --gpu-mem=1536M (the quota was reached)\n"}},
		{"two nodes, one refused", "44", []string{
			"44|bob|FAILED|node[01-03]|gpuslice:node02/" + uuidB + "=quota_mib:4096,peak_mib:3900,denied:2;node01/" + uuidA +
				"=quota_mib:4096,peak_mib:1000,denied:0;node03/refused=quota_mib:4096"}, 0,
			[]string{"GPU memory peak: 3.8GiB (the highest of 2 GPUs)\n", "GPU memory efficiency: 95% of 4GiB\n",
				"Allocations refused: 2\n",
				"Quota refused on node03: gpusliced there could not give 4GiB; the job did not run there\n",
				"  node01  GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b  4GiB   1000MiB  24%         0\n",
				"  node02  GPU-1a2b3c4d-cd90-4869-996b-d2ca1bdef09b  4GiB   3.8GiB   95%         2\n",
				"Next time: ask for more, e.g. --gpu-mem=5G (the quota was reached)\n"}},
		{"an array", "50", []string{
			"50_1|alice|COMPLETED|node01|gpuslice:node01/" + uuidA + "=quota_mib:4096,peak_mib:300,denied:0",
			"50_2|alice|COMPLETED|node02|gpuslice:node02/" + uuidB + "=quota_mib:4096,peak_mib:700,denied:0",
			"50_3|alice|CANCELLED|None assigned|",
		}, 0,
			[]string{"Job ID: 50 (2 jobs with GPU memory figures)\n",
				"  50_1  COMPLETED  node01  4GiB   300MiB  7%          0\n",
				"  50_2  COMPLETED  node02  4GiB   700MiB  17%         0\n",
				"GPU memory peak: 700MiB (the highest of 2 jobs)\n", "GPU memory efficiency: 17% of 4GiB\n",
				"Next time: --gpu-mem=1G would do for every one of these jobs (the peak plus a margin)\n",
				"Without GPU memory figures: 50_3\n"}},
		{"the summary of a job on 256 nodes, one refused", "47", []string{
			"47|carol|COMPLETED|gn[001-256]|gpuslice:v2;quota_mib=8192;nodes=256;reported=0-255;refused=16;peak_mib=7800;peak_on=gn042/" +
				uuidB + ";denied=3"}, 0,
			[]string{"Job ID: 47\n", "Nodes: gn[001-256]\n", "GPU memory asked: 8GiB per GPU (--gpu-mem)\n",
				"GPU memory peak: 7.6GiB (GPU-1a2b3c4d-cd90-4869-996b-d2ca1bdef09b on gn042)\n",
				"GPU memory efficiency: 95% of 8GiB\n", "Allocations refused: 3\n", "Nodes with figures: 256 of 256\n",
				"Quota refused on gn017: gpusliced there could not give 8GiB; the job did not run there\n",
				"Next time: ask for more, e.g. --gpu-mem=10G (the quota was reached)\n"}},
		{"a summary not every node is in yet", "48", []string{
			"48|carol|COMPLETED|gn[1-4]|gpuslice:v2;quota_mib=1024;nodes=4;reported=0,2;peak_mib=300;peak_on=gn3/" + uuidA + ";denied=0"}, 0,
			[]string{"GPU memory peak: 300MiB (GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b on gn3)\n", "Nodes with figures: 2 of 4\n"}},
		{"an array with tasks of both releases", "51", []string{
			"51_1|alice|COMPLETED|node01|gpuslice:node01/" + uuidA + "=quota_mib:4096,peak_mib:300,denied:0",
			"51_2|alice|COMPLETED|node02|gpuslice:v2;quota_mib=4096;nodes=1;reported=0;peak_mib=900;peak_on=node02/" + uuidB + ";denied=1",
		}, 0,
			[]string{"Job ID: 51 (2 jobs with GPU memory figures)\n",
				"  51_2  COMPLETED  node02  4GiB   900MiB  22%         1\n",
				"GPU memory peak: 900MiB (the highest of 2 jobs)\n", "Allocations refused: 1\n"}},
		{"a summary this release cannot read", "52", []string{"52|alice|COMPLETED|node01|gpuslice:v2;what=1"}, 0,
			[]string{"Job 52: no GPU memory figures in Slurm's accounting (52).\n"}},
		{"a site's own comment", "45", []string{"45|alice|COMPLETED|node01|billing=gold"}, 0,
			[]string{"Job 45: no GPU memory figures in Slurm's accounting (45).\n"}},
		{"no such job", "46", nil, cli.ExitNotFound, []string{"job 46: not found in Slurm's accounting"}},
		{"not a job id", "42;rm", nil, cli.ExitUsage, []string{`job ID "42;rm"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := seff(t, fakeSacct(t, tc.id, tc.lines...), tc.id)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(out+errs, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, errs)
				}
			}
		})
	}
}

// --json: the figures per job and GPU, the summary, the advice.
func TestSeffJSON(t *testing.T) {
	sacct := fakeSacct(t, "44", "44|bob|COMPLETED|node[01-02]|gpuslice:node02/"+uuidB+
		"=quota_mib:8192,peak_mib:2048,denied:0;node01/"+uuidA+"=quota_mib:8192,peak_mib:1024,denied:0")
	code, out, errs := seff(t, sacct, "--json", "44")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Jobs []struct {
			JobID string `json:"job_id"`
			GPUs  []struct {
				Node          string `json:"node"`
				UUID          string `json:"uuid"`
				QuotaBytes    uint64 `json:"quota_bytes"`
				PeakBytes     uint64 `json:"peak_bytes"`
				EfficiencyPct int    `json:"efficiency_pct"`
			} `json:"gpus"`
			PeakBytes uint64 `json:"peak_bytes"`
			Advice    string `json:"advice"`
			Ask       string `json:"ask"`
		} `json:"jobs"`
		Summary struct {
			EfficiencyPct int    `json:"efficiency_pct"`
			Advice        string `json:"advice"`
			Ask           string `json:"ask"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Jobs) != 1 || len(got.Jobs[0].GPUs) != 2 || got.Jobs[0].GPUs[0].Node != "node01" ||
		got.Jobs[0].GPUs[0].UUID != "GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b" || got.Jobs[0].GPUs[1].PeakBytes != 2<<30 ||
		got.Jobs[0].GPUs[1].EfficiencyPct != 25 || got.Jobs[0].PeakBytes != 2<<30 || got.Jobs[0].Advice != "lower" ||
		got.Jobs[0].Ask != "2560M" || got.Summary.EfficiencyPct != 25 || got.Summary.Ask != "2560M" {
		t.Fatalf("%+v\n%s", got, out)
	}
}

// sacct's own error reaches the user.
func TestSeffSacctFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sacct")
	os.WriteFile(path, []byte("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n"), 0o755)
	code, _, errs := seff(t, path, "42")
	if code == 0 || !strings.Contains(errs, "accounting storage is disabled") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
