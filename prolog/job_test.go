package prolog

import (
	"errors"
	"reflect"
	"testing"
)

func envFunc(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestJobFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		def     uint64
		want    Job
		wantErr bool
		noJob   bool
	}{
		{"quota, all GPUs", map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "1000", "SPANK_GPU_MEM": "8589934592"}, 0,
			Job{ID: "42", UID: 1000, QuotaBytes: 8 << 30}, false, false},
		{"no quota", map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "0"}, 0,
			Job{ID: "42", UID: 0}, false, false},
		{"default applies", map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "7"}, 1 << 30,
			Job{ID: "42", UID: 7, QuotaBytes: 1 << 30}, false, false},
		{"explicit wins over default", map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "7", "SPANK_GPU_MEM": "2048"}, 1 << 30,
			Job{ID: "42", UID: 7, QuotaBytes: 2048}, false, false},
		{"SLURM_JOBID fallback", map[string]string{"SLURM_JOBID": "9", "SLURM_JOB_UID": "7"}, 0,
			Job{ID: "9", UID: 7}, false, false},
		{"gres GPUs", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "7", "SPANK_GPU_MEM": "1", "SLURM_JOB_GPUS": "0,2", "CUDA_VISIBLE_DEVICES": "5"}, 0,
			Job{ID: "1", UID: 7, QuotaBytes: 1, GPUs: []string{"0", "2"}}, false, false},
		{"CUDA_VISIBLE_DEVICES when no SLURM_JOB_GPUS", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "7", "CUDA_VISIBLE_DEVICES": "1"}, 0,
			Job{ID: "1", UID: 7, GPUs: []string{"1"}}, false, false},
		{"node and the job's nodes", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "7", "SLURMD_NODENAME": "tn2", "SLURM_JOB_NODELIST": "tn[1-2]",
			"SLURM_JOB_NUM_NODES": "2"}, 0,
			Job{ID: "1", UID: 7, Node: "tn2", NodeList: "tn[1-2]", NodeCount: 2}, false, false},
		{"a node count that is not one", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "7", "SLURM_JOB_NUM_NODES": "x"}, 0,
			Job{ID: "1", UID: 7}, false, false},
		{"no job id", map[string]string{"SLURM_JOB_UID": "7"}, 0, Job{}, true, true},
		{"no uid", map[string]string{"SLURM_JOB_ID": "1"}, 0, Job{}, true, true},
		{"bad uid", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "-1"}, 0, Job{}, true, false},
		{"bad job id", map[string]string{"SLURM_JOB_ID": "../x", "SLURM_JOB_UID": "1"}, 0, Job{}, true, false},
		{"bad quota", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "1", "SPANK_GPU_MEM": "8G"}, 0, Job{}, true, false},
		{"zero quota", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "1", "SPANK_GPU_MEM": "0"}, 0, Job{}, true, false},
		{"bad GPU list", map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_UID": "1", "SLURM_JOB_GPUS": "0,,1"}, 0, Job{}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := JobFromEnv(envFunc(tt.env), tt.def)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if errors.Is(err, ErrNoJob) != tt.noJob {
				t.Fatalf("err = %v, want ErrNoJob %v", err, tt.noJob)
			}
			if err == nil && !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseGPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"NoDevFiles", nil, false},
		{"0", []string{"0"}, false},
		{"0,1,3", []string{"0", "1", "3"}, false},
		{" 1 , 0 ", []string{"1", "0"}, false},
		{"1,1", []string{"1"}, false},
		{"GPU-0a1b2c3d-0000-1111-2222-333344445555,0", []string{"GPU-0a1b2c3d-0000-1111-2222-333344445555", "0"}, false},
		{"0,", nil, true},
		{"GPU-", nil, true},
		{"MIG-1234", nil, true},
		{"-1", nil, true},
		{"99999", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseGPUList(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseGPUList(%q) err = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseGPUList(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
