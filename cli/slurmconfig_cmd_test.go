package cli_test

import (
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
