package prolog

import (
	"reflect"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
)

func TestComputeFromEnv(t *testing.T) {
	for _, tc := range []struct {
		share, max string
		want       *api.Compute
	}{
		{"", "", nil},
		{"off", "", nil},
		{"25", "", &api.Compute{Mode: api.ComputePercent, Percent: 25}},
		{"proportional", "", &api.Compute{Mode: api.ComputeProportional}},
		{"proportional", "30", &api.Compute{Mode: api.ComputeProportional, MaxPercent: 30}},
		{"", "30", &api.Compute{Mode: api.ComputeOff, MaxPercent: 30}},
		{"0", "", nil},
		{"101", "", nil},
		{"25", "x", nil},
		{"fast", "", nil},
	} {
		env := map[string]string{EnvCompute: tc.share, EnvComputeMax: tc.max}
		got := ComputeFromEnv(func(k string) string { return env[k] })
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("GPU_COMPUTE=%q GPU_COMPUTE_MAX=%q: %+v, want %+v", tc.share, tc.max, got, tc.want)
		}
	}
}
