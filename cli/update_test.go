package cli_test

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/cli"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// gpuslice allocate --gpu-compute and gpuslice update against a real
// gpusliced: the share is kept and shown by status, update changes the
// flags it is given and keeps the others, removes a share, changes the
// quota and TTL, and refuses what is wrong with the exit codes of the
// other commands.
func TestUpdateCommand(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x16GiB"})
	const share = "GPU time share on each GPU:"
	steps := []struct {
		name    string
		args    []string
		code    int
		want    []string
		notWant []string
	}{
		{"allocate with a share", []string{"allocate", "--gpu-mem", "2G", "--gpu-compute", "25", "--gpu-compute-max", "50", "j"}, 0,
			[]string{share + " 25% (at most 50%)"}, nil},
		{"allocate a bad share", []string{"allocate", "--gpu-mem", "2G", "--gpu-compute", "150", "k"}, cli.ExitUsage,
			[]string{"compute percent 150 (want 1..100)"}, nil},
		{"allocate a share that is not one", []string{"allocate", "--gpu-mem", "2G", "--gpu-compute", "most", "k"}, cli.ExitUsage,
			[]string{"want a percent 1..100, proportional or off"}, nil},
		{"allocate proportional", []string{"allocate", "--gpu-mem", "4G", "--gpu-compute", "proportional", "p"}, 0,
			[]string{share + " proportional to the quota"}, nil},
		{"allocate without a share", []string{"allocate", "--gpu-mem", "1G", "n"}, 0, []string{"Session n"}, []string{share}},
		{"update the ceiling only", []string{"update", "j", "--gpu-compute-max", "30"}, 0, []string{share + " 25% (at most 30%)"}, nil},
		{"status shows it", []string{"status", "j"}, 0, []string{share + " 25% (at most 30%)"}, nil},
		{"update the weight only", []string{"update", "j", "--gpu-compute", "60"}, 0, []string{share + " 60% (at most 30%)"}, nil},
		{"update removes the ceiling", []string{"update", "j", "--gpu-compute-max", "0"}, 0, []string{share + " 60%"}, []string{"at most"}},
		{"update removes the share", []string{"update", "j", "--gpu-compute", "off"}, 0, []string{"Session j"}, []string{share}},
		{"status shows none", []string{"status", "j"}, 0, []string{"Session j"}, []string{share}},
		{"update gives one", []string{"update", "n", "--gpu-compute-max", "40"}, 0, []string{share + " at most 40%"}, nil},
		{"update the quota", []string{"update", "j", "--gpu-mem", "3G"}, 0, []string{"3GiB"}, []string{"2GiB"}},
		{"update the quota past the GPU", []string{"update", "j", "--gpu-mem", "15G"}, cli.ExitRefused, []string{"free"}, nil},
		{"update the ttl", []string{"update", "j", "--ttl", "2h"}, 0, []string{"Session j"}, nil},
		{"update a bad ttl", []string{"update", "j", "--ttl", "soon"}, cli.ExitUsage, []string{"--ttl"}, nil},
		{"update a bad share", []string{"update", "j", "--gpu-compute", "0"}, cli.ExitUsage, []string{"compute percent 0"}, nil},
		{"update nothing", []string{"update", "j"}, cli.ExitUsage, []string{"nothing to change"}, nil},
		{"update a missing session", []string{"update", "nope", "--gpu-compute", "10"}, cli.ExitNotFound, []string{"not found"}, nil},
	}
	for _, s := range steps {
		code, out, errOut := gs(t, d, s.args...)
		all := out + errOut
		if code != s.code {
			t.Errorf("%s: gpuslice %v exit %d, want %d\n%s", s.name, s.args, code, s.code, all)
			continue
		}
		for _, w := range s.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: output lacks %q:\n%s", s.name, w, all)
			}
		}
		for _, w := range s.notWant {
			if strings.Contains(all, w) {
				t.Errorf("%s: output has %q:\n%s", s.name, w, all)
			}
		}
	}
}
