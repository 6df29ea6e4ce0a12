package prolog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHasWholeGPUsNote(t *testing.T) {
	tests := []struct {
		comment string
		want    bool
	}{
		{"gpuslice=whole-gpus", true},
		{"my run 7 gpuslice=whole-gpus", true},
		{"", false},
		{"my run 7", false},
		{"xgpuslice=whole-gpus", false},         // not as job_submit.lua writes it
		{"gpuslice=whole-gpus my run", false},   // the note ends the comment
		{"gpuslice=whole-gpus ", false},         // nothing after it
		{"GPUSLICE=WHOLE-GPUS", false},          // exactly as written
		{"my run gpuslice=whole-gpus\n", false}, // nor a line after it
	}
	for _, tc := range tests {
		if got := HasWholeGPUsNote(tc.comment); got != tc.want {
			t.Errorf("HasWholeGPUsNote(%q) = %v, want %v", tc.comment, got, tc.want)
		}
	}
}

// The Prolog decides from its environment alone whether a job with the
// default quota gets it: whole GPUs (the note in its comment) get no
// session, anything else the quota; a quota from --gpu-mem applies
// whatever the comment says. gpusliced is unreachable here, so a Prolog
// that creates a session fails with exit 1 and says so; one that runs a
// program named by --scontrol (an older flag, ignored now) leaves a file.
func TestPrologWholeGPUsFromComment(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, "admin.sock") // nothing listens here
	ran := filepath.Join(dir, "scontrol-ran")
	scontrol := filepath.Join(dir, "scontrol")
	if err := os.WriteFile(scontrol, []byte("#!/bin/sh\ntouch "+ran+"\necho JobId=77 TresPerNode=gres:gpu:1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(quotaDefault, comment string) map[string]string {
		m := map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_UID": "1000", "SPANK_GPU_MEM": "1073741824",
			"SPANK_GPU_MEM_DEFAULT": quotaDefault}
		if comment != "" {
			m["SLURM_JOB_COMMENT"] = comment
		}
		return m
	}
	const noQuota = "whole GPUs without --gpu-mem: no quota"
	const quota = "cannot set up the GPU memory quota of 1GiB"
	tests := []struct {
		name   string
		env    map[string]string
		code   int
		stderr string
	}{
		{"default quota, whole GPUs: no session", env("1", WholeGPUsNote), 0, noQuota},
		{"default quota, whole GPUs, the user's comment kept: no session", env("1", "run 7 "+WholeGPUsNote), 0, noQuota},
		{"default quota, a share: the quota", env("1", ""), 1, quota},
		{"default quota, a share with its own comment: the quota", env("1", "run 7"), 1, quota},
		{"default quota, a note job_submit.lua did not write: the quota", env("1", "x"+WholeGPUsNote), 1, quota},
		{"--gpu-mem with the note: the quota", env("0", WholeGPUsNote), 1, quota},
		{"--gpu-mem from an older plugin (no SPANK_GPU_MEM_DEFAULT): the quota", env("", WholeGPUsNote), 1, quota},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(ran)
			var stderr bytes.Buffer
			args := []string{"--admin-socket", dead, "--retry-timeout", "200ms", "--scontrol", scontrol}
			code := Main(ModeProlog, args, envFunc(tt.env), &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("exit %d, want %d saying %q; stderr:\n%s", code, tt.code, tt.stderr, stderr.String())
			}
			if !strings.Contains(stderr.String(), "--scontrol "+scontrol+" is ignored: gpuslice-prolog runs no Slurm command") {
				t.Errorf("--scontrol was not said to be ignored:\n%s", stderr.String())
			}
			if _, err := os.Stat(ran); err == nil {
				t.Errorf("the Prolog ran %s", scontrol)
			}
		})
	}
}

// Without --scontrol, nothing is said about it; the flag is not in --help.
func TestScontrolFlagRetired(t *testing.T) {
	var stderr bytes.Buffer
	env := map[string]string{"SLURM_JOB_ID": "77", "SLURM_JOB_UID": "1000"}
	if code := Main(ModeProlog, nil, envFunc(env), &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
	stderr.Reset()
	if code := Main(ModeEpilog, []string{"--help"}, envFunc(env), &stderr); code != 0 || strings.Contains(stderr.String(), "scontrol") {
		t.Fatalf("--help: exit %d, mentions scontrol:\n%s", code, stderr.String())
	}
}
