package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// epilogBench times the Epilog as slurmd runs it (the gpuslice-epilog
// program, exec to exit): release the job's session and hand its figures
// to gpusliced, with gpusliced's accounting on and Slurm's accounting
// unreachable (a sacct and a sacctmgr that never answer, as when slurmdbd
// hangs). The Epilog waits on gpusliced alone, whatever slurmdbd does.
func epilogBench(o options, n int) (p50, p99 float64, err error) {
	dir, err := os.MkdirTemp("/tmp", "gsbe")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	hang := []byte("#!/bin/sh\nexec sleep 3600\n")
	for _, p := range []string{"sacct", "sacctmgr"} {
		if err := os.WriteFile(filepath.Join(dir, p), hang, 0o755); err != nil {
			return 0, 0, err
		}
	}
	conf := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(conf, []byte("AccountingStorageType=accounting_storage/slurmdbd\n"), 0o644); err != nil {
		return 0, 0, err
	}
	d, err := startDaemon(o.build, "2x80GiB", false, "GPUSLICE_ACCOUNTING=on", "GPUSLICE_SACCT="+filepath.Join(dir, "sacct"),
		"GPUSLICE_SACCTMGR="+filepath.Join(dir, "sacctmgr"), "GPUSLICE_SLURM_CONF="+conf)
	if err != nil {
		return 0, 0, err
	}
	defer d.stop()
	epilog := filepath.Join(o.build, "bin", "gpuslice-epilog")
	lat := make([]float64, 0, n)
	for i := 0; i < n+10; i++ {
		id := strconv.Itoa(900000 + i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := d.cl.CreateSession(ctx, client.SessionRequest{ID: id, UID: 1000, QuotaBytes: 1 << 30})
		cancel()
		if err != nil {
			return 0, 0, err
		}
		cmd := exec.Command(epilog, "--admin-socket", d.adminSock, "--refusal-dir", filepath.Join(dir, "refused"))
		// slurmd's environment for the Epilog of a job on 4 nodes
		cmd.Env = []string{"SLURM_JOB_ID=" + id, "SLURM_JOB_UID=1000", "SLURMD_NODENAME=gn002",
			"SLURM_JOB_NODELIST=gn[001-004]", "SPANK_GPU_MEM=1073741824"}
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		el := float64(time.Since(t0).Nanoseconds()) / 1e6
		if err != nil {
			return 0, 0, fmt.Errorf("gpuslice-epilog: %v: %s", err, out)
		}
		if i == 0 && !strings.Contains(string(out), "figures queued by gpusliced") {
			return 0, 0, fmt.Errorf("gpuslice-epilog did not queue the job's figures: %s", out)
		}
		if i >= 10 {
			lat = append(lat, el)
		}
	}
	return percentile(lat, 50), percentile(lat, 99), nil
}
