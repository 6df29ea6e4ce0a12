package nvidia

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ffmpegArgs makes ffmpeg (Debian's, built with ffnvcodec: it dlopens
// libcuda.so.1 and resolves the driver, GL interop included, with dlsym)
// create a CUDA device, upload five generated NV12 frames to it and, with
// download, bring them back and print the MD5 of what came back.
func ffmpegArgs(download bool) []string {
	args := []string{"-hide_banner", "-nostdin", "-loglevel", "error"}
	vf := "format=nv12"
	if download {
		args = append(args, "-init_hw_device", "cuda=cu:0", "-filter_hw_device", "cu")
		vf = "format=nv12,hwupload,hwdownload,format=nv12"
	}
	return append(args, "-f", "lavfi", "-i", "testsrc=size=320x240:rate=5:duration=1", "-vf", vf, "-f", "md5", "-")
}

var ffmpegMD5 = regexp.MustCompile(`^MD5=[0-9a-f]{32}$`)

// ffmpeg uploads frames to a fakecuda device and downloads them intact, and
// under a 64 KiB quota its first frame allocation is refused.
func TestFFmpegCUDA(t *testing.T) {
	toolsRoot(t)
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatalf("ffmpeg is not installed (mk/deps.mk installs it): %v", err)
	}
	row := &toolsRow{Program: "ffmpeg (Debian " + ffmpegVersion(t, ffmpeg) + "): -init_hw_device cuda, hwupload"}
	defer toolsRecord(t, row)

	row.Runs = t.Run("plain", func(t *testing.T) {
		n := newToolsNode(t, "4GiB")
		sw := toolsExec(t, n.env(), append([]string{ffmpeg}, ffmpegArgs(false)...)...).ok(t)
		hw := toolsExec(t, n.env(), append([]string{ffmpeg}, ffmpegArgs(true)...)...).ok(t)
		toolsLoaded(t, hw, filepath.Join(n.build, "lib"), filepath.Join(n.build, "lib", "libcuda.so.1"))
		want := strings.TrimSpace(sw.stdout)
		if !ffmpegMD5.MatchString(want) {
			t.Fatalf("ffmpeg without CUDA: %q", sw.stdout)
		}
		if got := strings.TrimSpace(hw.stdout); got != want {
			t.Errorf("frames through the CUDA device: %s, want %s (as without it)\n%s", got, want, hw.stderr)
		}
	})

	row.QuotaEnforced = t.Run("session", func(t *testing.T) {
		d := toolsDaemon(t, "16GiB")
		r := toolsInSession(t, d, "64K", nil, append([]string{ffmpeg}, ffmpegArgs(true)...)...)
		lib := filepath.Join(d.Build, "lib")
		toolsLoaded(t, r, lib, filepath.Join(lib, "libcuda.so.1"), filepath.Join(lib, "libgpuslice.so"))
		if r.code == 0 || !strings.Contains(r.stderr, "Cannot allocate memory") ||
			!strings.Contains(r.stderr, "CUDA_ERROR_OUT_OF_MEMORY") {
			t.Errorf("ffmpeg under a 64 KiB quota: exit %d, want a refused frame allocation "+
				"(\"Cannot allocate memory\")\n%s", r.code, r.stderr)
		}
		// the same pipeline fits a 64 MiB quota: the refusal was the quota's
		r = toolsInSession(t, d, "64M", nil, append([]string{ffmpeg}, ffmpegArgs(true)...)...).ok(t)
		if !ffmpegMD5.MatchString(strings.TrimSpace(r.stdout)) {
			t.Errorf("ffmpeg under a 64 MiB quota: %q", r.stdout)
		}
	})
	row.Note = "5 NV12 frames uploaded and downloaded intact (same MD5 as without CUDA); " +
		"refused under a 64 KiB quota (\"Cannot allocate memory\"), fits 64 MiB; ffmpeg makes no memory query"
}

// ffmpegVersion is the version ffmpeg -version reports ("5.1.6-0+deb12u1").
func ffmpegVersion(t *testing.T, ffmpeg string) string {
	t.Helper()
	out, err := exec.Command(ffmpeg, "-version").Output()
	if err != nil {
		t.Fatalf("ffmpeg -version: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 || f[0] != "ffmpeg" || f[1] != "version" {
		t.Fatalf("ffmpeg -version: %q", out)
	}
	return f[2]
}
