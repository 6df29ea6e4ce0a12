package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/cli"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The command against a real gpusliced: the lines of its GPUs, each --print.
func TestSlurmConfigCommand(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "16GiB,40GiB", Overcommit: 1.5})
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"slurm-config", "--node", "tn9", "--overcommit", "1", "--print", "node"}, 0,
			[]string{"NodeName=tn9 Gres=gpu:2,shard:57344\n"}},
		{[]string{"slurm-config", "--node", "tn9", "--overcommit", "1.5", "--print", "gres"}, 0,
			[]string{"NodeName=tn9 Name=gpu File=/dev/nvidia0\nNodeName=tn9 Name=shard Count=24576 File=/dev/nvidia0\n" +
				"NodeName=tn9 Name=gpu File=/dev/nvidia1\nNodeName=tn9 Name=shard Count=61440 File=/dev/nvidia1\n"}},
		{[]string{"slurm-config", "--node", "tn9", "--overcommit", "1"}, 0,
			[]string{"GresTypes=gpu,shard", "\nNodeName=tn9 Gres=gpu:2,shard:57344\n", "GPUs of different sizes on one node"}},
		{[]string{"slurm-config", "--print", "bogus"}, cli.ExitUsage, nil},
		{[]string{"slurm-config", "extra"}, cli.ExitUsage, nil},
	}
	for _, tt := range tests {
		code, stdout, stderr := gs(t, d, tt.args...)
		if code != tt.code {
			t.Errorf("gpuslice %v: exit %d, want %d; stderr %s", tt.args, code, tt.code, stderr)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("gpuslice %v: output lacks %q:\n%s", tt.args, w, stdout)
			}
		}
		if tt.code == 0 && strings.Count(stdout, "shard:") > 1 && tt.args[len(tt.args)-1] == "node" {
			t.Errorf("--print node printed more than the node line:\n%s", stdout)
		}
	}
}

// gres.conf's File= lines must name character devices that exist (slurmd
// stops at start otherwise): slurm-config warns on stderr about each file
// that does not, and prints the same lines on stdout either way.
func TestSlurmConfigDeviceWarning(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB"})
	dir := t.TempDir()
	// Character devices: links to /dev/null (os.Stat follows them, as slurmd does).
	chr := filepath.Join(dir, "chr")
	reg := filepath.Join(dir, "reg")
	for _, sub := range []string{chr, reg} {
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := os.Symlink("/dev/null", filepath.Join(chr, fmt.Sprintf("nvidia%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(reg, "nvidia0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(reg, "nvidia1")); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "none")
	gresLines := func(dir string) string {
		var b strings.Builder
		for i := 0; i < 2; i++ {
			dev := filepath.Join(dir, fmt.Sprintf("nvidia%d", i))
			fmt.Fprintf(&b, "NodeName=tn9 Name=gpu File=%s\nNodeName=tn9 Name=shard Count=16384 File=%s\n", dev, dev)
		}
		return b.String()
	}
	tests := []struct {
		name   string
		dir    string
		print  string
		stdout string
		warn   []string // stderr lines (each a prefix), in order; nil: stderr empty
	}{
		{"character devices", chr, "gres", gresLines(chr), nil},
		{"missing", missing, "gres", gresLines(missing), []string{
			"gpuslice slurm-config: warning: " + filepath.Join(missing, "nvidia0") + " does not exist",
			"gpuslice slurm-config: warning: " + filepath.Join(missing, "nvidia1") + " does not exist",
			"gpuslice slurm-config: warning: slurmd does not start with such a File= in gres.conf; on a node without GPUs " +
				"create stand-in character devices (mknod DIR/nvidiaN c 195 N) and pass --device-format DIR/nvidia%d " +
				"(docs/install.md \"Without a GPU\")",
		}},
		{"regular file", reg, "gres", gresLines(reg), []string{
			"gpuslice slurm-config: warning: " + filepath.Join(reg, "nvidia0") + " is not a character device (a regular file)",
			"gpuslice slurm-config: warning: slurmd does not start",
		}},
		// The commented output carries the gres.conf lines too.
		{"all, missing", missing, "all", "\n" + gresLines(missing), []string{
			"gpuslice slurm-config: warning: " + filepath.Join(missing, "nvidia0") + " does not exist",
			"gpuslice slurm-config: warning: " + filepath.Join(missing, "nvidia1") + " does not exist",
			"gpuslice slurm-config: warning: slurmd does not start",
		}},
		// The NodeName line names no device file.
		{"node", missing, "node", "NodeName=tn9 Gres=gpu:2,shard:32768\n", nil},
		// Nor does a partition's TRESBillingWeights.
		{"billing", missing, "billing", "TRESBillingWeights=GRES/gpu=16,GRES/shard=0.0009765625\n", nil},
		{"all: accounting lines", chr, "all", "#   AccountingStorageTRES=gres/gpu,gres/shard\n", nil},
	}
	for _, tt := range tests {
		args := []string{"slurm-config", "--node", "tn9", "--overcommit", "1", "--print", tt.print,
			"--device-format", filepath.Join(tt.dir, "nvidia%d")}
		code, stdout, stderr := gs(t, d, args...)
		if code != 0 {
			t.Errorf("%s: gpuslice %v: exit %d, want 0; stderr %s", tt.name, args, code, stderr)
			continue
		}
		if tt.print == "all" {
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("%s: stdout lacks the gres.conf lines %q:\n%s", tt.name, tt.stdout, stdout)
			}
		} else if stdout != tt.stdout {
			t.Errorf("%s: stdout %q, want %q (the warning goes to stderr only)", tt.name, stdout, tt.stdout)
		}
		if tt.warn == nil {
			if stderr != "" {
				t.Errorf("%s: stderr %q, want none", tt.name, stderr)
			}
			continue
		}
		got := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if len(got) != len(tt.warn) {
			t.Errorf("%s: stderr has %d lines, want %d:\n%s", tt.name, len(got), len(tt.warn), stderr)
			continue
		}
		for i, w := range tt.warn {
			if !strings.HasPrefix(got[i], w) {
				t.Errorf("%s: stderr line %d %q, want it to start with %q", tt.name, i+1, got[i], w)
			}
		}
	}
}

// A node whose driver has NVML's memory limits on every GPU (fakecuda with
// FAKECUDA_MEMORY_LIMITS=1) gets the gpuslice_driver_limit feature, and
// gpuslice gpus shows each GPU's enforcement.
func TestSlurmConfigDriverLimitFeature(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the probe reads a cgroup's limits as gpusliced does on a node: root")
	}
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB", ExtraEnv: []string{"FAKECUDA_MEMORY_LIMITS=1"}})
	code, stdout, stderr := gs(t, d, "slurm-config", "--node", "tn9", "--overcommit", "1", "--print", "node")
	if code != 0 || stdout != "NodeName=tn9 Gres=gpu:2,shard:32768 Features=gpuslice_driver_limit\n" {
		t.Fatalf("exit %d, node line %q (stderr %s); want the gpuslice_driver_limit feature", code, stdout, stderr)
	}
	code, stdout, _ = gs(t, d, "gpus")
	if code != 0 || strings.Count(stdout, "driver+interceptor") != 2 {
		t.Fatalf("gpuslice gpus: exit %d\n%s\nwant driver+interceptor on both GPUs", code, stdout)
	}
}
