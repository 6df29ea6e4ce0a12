package plugstack

import (
	"reflect"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

func TestComputeArguments(t *testing.T) {
	for _, tc := range []struct {
		line, err string
	}{
		{"compute=proportional compute_cap=40", ""},
		{"compute=off", ""},
		{"compute=", "compute=: expected proportional or off"},
		{"compute=fair", "compute=fair: expected proportional or off"},
		{"compute_cap=0", "compute_cap=0: expected a percent from 1 to 100"},
		{"compute_cap=101", "compute_cap=101: expected a percent"},
		{"computer=1", "unknown plugstack.conf argument 'computer'"},
	} {
		err := Parse(tc.line)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %v, want %q", tc.line, err, tc.err)
		}
	}
}

func TestComputeOptions(t *testing.T) {
	for _, tc := range []struct {
		line       string
		share, max *string
		want       map[string]string
		err        string
	}{
		{"", nil, nil, map[string]string{}, ""},
		{"", ptr("25"), nil, map[string]string{"GPU_COMPUTE": "25"}, ""},
		{"", ptr("25"), ptr("40"), map[string]string{"GPU_COMPUTE": "25", "GPU_COMPUTE_MAX": "40"}, ""},
		// compute= and compute_cap= are read in the user's own srun: they
		// are accepted and decide nothing (the site's policy is in
		// job_submit.lua and gpusliced.yaml).
		{"compute=proportional compute_cap=30", nil, nil, map[string]string{}, ""},
		{"compute=proportional compute_cap=30", ptr("60"), ptr("70"),
			map[string]string{"GPU_COMPUTE": "60", "GPU_COMPUTE_MAX": "70"}, ""},
		{"", ptr("0"), nil, nil, "invalid --gpu-compute '0': expected a percent of the GPU from 1 to 100"},
		{"", ptr("50%"), nil, nil, "invalid --gpu-compute '50%'"},
		{"", nil, ptr("200"), nil, "invalid --gpu-compute-max '200'"},
	} {
		if err := Parse(tc.line); err != nil {
			t.Fatal(err)
		}
		got, err := Submit(tc.share, tc.max)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %v %v: %v, want error %q", tc.line, tc.share, tc.max, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.line, got, err, tc.want)
		}
	}
}
