package core

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/tests/interceptor/probe"
)

// Imported memory is the exporter's: a process opening another's IPC
// handle or importing its shareable VMM handle is not charged (not even
// past its own quota), and releasing the import gives nothing back to
// anyone. A process importing its own export gets its handle back: the
// memory stays charged once, until the last release.
func TestImportedMemoryChargedOnce(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	exp := newSession(t, d, client.SessionRequest{QuotaBytes: GiB})
	imp := newSession(t, d, client.SessionRequest{QuotaBytes: 16 * MiB})
	le, li := openLedger(t, d, exp.ID), openLedger(t, d, imp.ID)

	a := probe.Start(t, sessionEnv(t, d, exp.ID), probe.Bin(t, "gs_probe"),
		"dev:0", "vmmexport:64M", "alloc:32M", "ipcget", "pause",
		"vmmimport:self:last", "pause", "free", "pause", "free", "pause", "free", "pause")
	ex := a.Expect("vmmexport")
	ipc := a.Expect("ipcget")
	a.Expect("paused")
	if ex.Get("rc") != "0" || ipc.Get("rc") != "0" {
		t.Fatalf("export: %s / %s", ex.Line, ipc.Line)
	}
	if u := le.Used(0); u != 96*MiB {
		t.Fatalf("exporter charged %d MiB, want 96", u/MiB)
	}

	t.Run("another process", func(t *testing.T) {
		b := probe.Start(t, sessionEnv(t, d, imp.ID), probe.Bin(t, "gs_probe"), "dev:0",
			"vmmimport:"+ex.Get("pid")+":"+ex.Get("fd"), "ipcopen:"+ipc.Get("handle"), "pid", "pause", "free", "ipcclose")
		bpid := b.Expect("pid").Get("pid")
		b.Expect("paused")
		// the driver's per-process figure (what the audit reads): the
		// memory is the exporter's, not the importer's
		q := probe.Run(t, d.Env(), example(t, "nvml_query"))
		seen := false
		for _, pr := range q.All("process") {
			switch pr.Get("pid") {
			case bpid:
				if pr.Get("used") != "0" {
					t.Errorf("NVML lists the importer with %s bytes", pr.Get("used"))
				}
			case ex.Get("pid"):
				seen = true
				if pr.Get("used") != "100663296" {
					t.Errorf("NVML lists the exporter with %s bytes, want 96 MiB", pr.Get("used"))
				}
			}
		}
		if !seen {
			t.Errorf("NVML does not list the exporter:\n%s", q.Stdout)
		}
		b.Send("")
		if err := b.Wait(); err != nil {
			t.Fatalf("importer: %v\n%s", err, b.Output())
		}
		r := b.Result()
		for _, s := range []string{"vmmimport", "ipcopen", "free", "ipcclose"} {
			if rc := r.Find(t, s, 0).Get("rc"); rc != "0" {
				t.Errorf("%s: rc=%s\n%s", s, rc, r.Stdout)
			}
		}
		if li.Peak(0) != 0 {
			t.Errorf("importer charged: peak %d bytes under a 16 MiB quota", li.Peak(0))
		}
		if u := le.Used(0); u != 96*MiB {
			t.Errorf("exporter after the importer's release: %d MiB, want 96", u/MiB)
		}
	})

	t.Run("own export", func(t *testing.T) {
		a.Send("")
		if s := a.Expect("vmmimport"); s.Get("rc") != "0" || s.Get("same") != "1" {
			t.Fatalf("import of its own export: %s", s.Line)
		}
		for _, want := range []uint64{96, 96, 64, 0} { // import, release it, free 32M, release the export
			a.Expect("paused")
			if u := le.Used(0); u != want*MiB {
				t.Errorf("exporter charged %d MiB, want %d", u/MiB, want)
			}
			a.Send("")
		}
	})
	if err := a.Wait(); err != nil {
		t.Fatalf("exporter: %v\n%s", err, a.Output())
	}
}
