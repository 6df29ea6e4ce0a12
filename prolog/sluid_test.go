package prolog

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// SLURM_JOB_SLUID (Slurm 26.05) reaches the job's session as Slurm prints
// it; a malformed one is left out without failing the Prolog; a requeued
// job (same id, a new SLUID) replaces the session of its earlier run.
func TestPrologSLUID(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{Devices: "2x80GiB"})
	ctx := context.Background()
	c := d.Client()
	run := func(mode Mode, env map[string]string) string {
		t.Helper()
		var stderr bytes.Buffer
		args := []string{"--admin-socket", d.AdminSock}
		if mode == ModeEpilog {
			args = append(args, "--sacctmgr", "") // an earlier release's flag: accepted, ignored
		}
		if code := Main(mode, args, envFunc(env), &stderr); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
		}
		return stderr.String()
	}
	job := func(id, sluid string) map[string]string {
		return map[string]string{"SLURM_JOB_ID": id, "SLURM_JOB_UID": "1000", "SPANK_GPU_MEM": "1073741824", EnvSLUID: sluid}
	}
	for _, tc := range []struct {
		name, id, env, want string
	}{
		{"as Slurm prints it", "300", "sEKNKTV3WPV500", "sEKNKTV3WPV500"},
		{"other case", "301", "SEKNKTV3WPV501", "sEKNKTV3WPV501"},
		{"unset (Slurm before 26.05)", "302", "", ""},
		{"malformed", "303", "s123/../job_1", ""},
		{"I is not Crockford", "304", "sEKNKTV3WPVI00", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := run(ModeProlog, job(tc.id, tc.env))
			s, err := c.GetSession(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if s.SLUID != tc.want {
				t.Fatalf("session SLUID %q, want %q", s.SLUID, tc.want)
			}
			if tc.env != "" && tc.want == "" && !strings.Contains(log, "is not a SLUID") {
				t.Fatalf("a malformed SLURM_JOB_SLUID is not logged: %q", log)
			}
			run(ModeEpilog, job(tc.id, tc.env))
		})
	}
	t.Run("requeue: a new SLUID replaces the earlier run's session", func(t *testing.T) {
		run(ModeProlog, job("310", "s0000000000001"))
		run(ModeProlog, job("310", "s0000000000002"))
		s, err := c.GetSession(ctx, "310")
		if err != nil || s.SLUID != "s0000000000002" {
			t.Fatalf("session %+v, %v; want SLUID s0000000000002", s, err)
		}
	})
}
