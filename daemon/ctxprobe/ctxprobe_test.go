package ctxprobe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	gpu0 = "GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b"
	gpu1 = "GPU-1e99d75b-b2d4-4c2c-8a35-07e0a18838e7"
)

func TestParse(t *testing.T) {
	good := gpu0 + " ok 314572800\n" + gpu1 + " busy 2\n"
	res, err := parse([]byte(good), []string{gpu0, gpu1})
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{UUID: gpu0, State: Measured, Bytes: 314572800}, {UUID: gpu1, State: Busy, Busy: 2}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got %+v, want %+v", res, want)
	}
	res, err = parse([]byte(gpu0+" error cuDevicePrimaryCtxRetain: error 2\n"), []string{gpu0})
	if err != nil || res[0].State != Failed || res[0].Why != "cuDevicePrimaryCtxRetain: error 2" {
		t.Fatalf("error line: %+v %v", res, err)
	}

	// Anything else is refused, naming the fault; no figure is taken from it.
	for name, c := range map[string]struct{ out, fault string }{
		"too few lines":    {gpu0 + " ok 1\n", "1 lines for 2 GPUs"},
		"too many lines":   {gpu0 + " ok 1\n" + gpu1 + " ok 1\n" + gpu1 + " ok 1\n", "more lines than GPUs"},
		"other order":      {gpu1 + " ok 1\n" + gpu0 + " ok 1\n", "line 1: want"},
		"negative bytes":   {gpu0 + " ok -1\n" + gpu1 + " ok 1\n", "line 1: bytes"},
		"bytes overflow":   {gpu0 + " ok 1\n" + gpu1 + " ok 18446744073709551616\n", "line 2: bytes"},
		"busy without any": {gpu0 + " busy 0\n" + gpu1 + " ok 1\n", "process count"},
		"unknown state":    {gpu0 + " fine 1\n" + gpu1 + " ok 1\n", `unknown state "fine"`},
		"two fields":       {gpu0 + " ok\n" + gpu1 + " ok 1\n", "line 1: want"},
	} {
		if _, err := parse([]byte(c.out), []string{gpu0, gpu1}); err == nil || !strings.Contains(err.Error(), c.fault) {
			t.Errorf("%s: err %v, want one naming %q", name, err, c.fault)
		}
	}
}

// script writes an executable shell script standing in for the probe.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Options{Program: "/nonexistent/gpuslice-ctxprobe"}, []string{gpu0}); !errors.Is(err, ErrNoProgram) {
		t.Errorf("missing program: err %v, want ErrNoProgram", err)
	}
	failing := script(t, "echo 'gpuslice-ctxprobe: cannot load the CUDA driver: nope' >&2; exit 1\n")
	if _, err := Run(ctx, Options{Program: failing}, []string{gpu0}); err == nil || !strings.Contains(err.Error(), "cannot load the CUDA driver") {
		t.Errorf("failing probe: err %v, want its message", err)
	}
	if _, err := Run(ctx, Options{Program: failing}, []string{"GPU-0 --cuda"}); err == nil || !strings.Contains(err.Error(), "not a GPU UUID") {
		t.Errorf("UUID with a space: err %v", err)
	}

	// The arguments it is given, and an environment without what would
	// hide GPUs from it or load anything into it.
	t.Setenv("CUDA_VISIBLE_DEVICES", "1")
	t.Setenv("GPUSLICE_SESSION", "x")
	t.Setenv("FAKECUDA_CTX_BYTES", "1")
	echo := script(t, `[ "$*" = "--cuda /c/libcuda.so.1 --nvml /n/libnvidia-ml.so.1 `+gpu0+`" ] || { echo "args: $*" >&2; exit 4; }
[ -z "$CUDA_VISIBLE_DEVICES$GPUSLICE_SESSION" ] && [ "$FAKECUDA_CTX_BYTES" = 1 ] || exit 3
echo "`+gpu0+` ok 7"
`)
	res, err := Run(ctx, Options{Program: echo, CUDALibrary: "/c/libcuda.so.1", NVMLLibrary: "/n/libnvidia-ml.so.1"}, []string{gpu0})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Bytes != 7 {
		t.Fatalf("got %+v", res)
	}
}
