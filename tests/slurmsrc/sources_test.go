package slurmsrc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/sources.sh finds a pinned source in the machine's cache, then in
// GPUSLICE_SOURCES (checked against its SHA256SUMS and the pin), then at
// the project's URL (checked by contents, then cached), else exits 3 with
// one line. These tests give it a table of their own (GPUSLICE_SOURCES_TABLE)
// naming a small project whose URL is a file:// archive.

type resolver struct {
	t                     *testing.T
	dir, cache, srcs, tbl string
	tree                  string // the project's files
	archive, sum, content string // the pinned archive in srcs, its SHA-256, the contents' checksum
	url                   string // an archive of the same contents as the host serves it
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func newResolver(t *testing.T) *resolver {
	r := &resolver{t: t, dir: t.TempDir()}
	r.cache = filepath.Join(r.dir, "cache")
	r.srcs = filepath.Join(r.dir, "third_party")
	r.tree = filepath.Join(r.dir, "tree", "proj")
	for _, d := range []string{filepath.Join(r.tree, "bin"), r.srcs, filepath.Join(r.dir, "host")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel, body string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(r.tree, rel), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("README", "the pinned project\n", 0o644)
	write("bin/tool", "#!/bin/sh\necho tool\n", 0o755)
	if err := os.Symlink("bin/tool", filepath.Join(r.tree, "tool")); err != nil {
		t.Fatal(err)
	}
	// As `git archive --prefix=proj/` makes it, and as the project's host
	// serves the same commit: another top folder, another compression.
	r.archive = "proj-v1.tar.gz"
	run(t, "tar", "-czf", filepath.Join(r.srcs, r.archive), "-C", filepath.Dir(r.tree), "proj")
	host := filepath.Join(r.dir, "host", "proj-0123abc")
	run(t, "cp", "-a", r.tree, host)
	r.url = "file://" + filepath.Join(r.dir, "host", "v1.tar.xz")
	run(t, "tar", "-cJf", strings.TrimPrefix(r.url, "file://"), "-C", filepath.Dir(host), "proj-0123abc")
	r.sum = fileSHA256(t, filepath.Join(r.srcs, r.archive))
	r.content = strings.TrimSpace(run(t, sourcesScript(t), "sum", r.tree))
	r.writeSums(r.sum)
	r.writeTable(r.url)
	return r
}

func (r *resolver) writeSums(sum string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.srcs, "SHA256SUMS"), []byte(sum+"  "+r.archive+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *resolver) writeTable(url string) {
	r.t.Helper()
	r.tbl = filepath.Join(r.dir, "sources.txt")
	row := fmt.Sprintf("# test table\nproj v1 %s %s %s %s\n", r.archive, r.sum, r.content, url)
	if err := os.WriteFile(r.tbl, []byte(row), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// do runs sources.sh with the test's cache and table; srcs "" leaves
// GPUSLICE_SOURCES pointing nowhere. It returns the combined output and
// the exit status.
func (r *resolver) do(srcs string, args ...string) (string, int) {
	r.t.Helper()
	if srcs == "" {
		srcs = filepath.Join(r.dir, "no-such-directory")
	}
	cmd := exec.Command(sourcesScript(r.t), args...)
	cmd.Env = append(os.Environ(), "GPUSLICE_CACHE="+r.cache, "GPUSLICE_SOURCES="+srcs, "GPUSLICE_SOURCES_TABLE="+r.tbl)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		r.t.Fatal(err)
	}
	return string(out), 0
}

// unpacked checks that dir holds the project's files.
func (r *resolver) unpacked(dir string) {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "README"))
	if err != nil || string(b) != "the pinned project\n" {
		r.t.Fatalf("%s/README: %q, %v", dir, b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "bin", "tool")); err != nil || st.Mode()&0o111 == 0 {
		r.t.Fatalf("%s/bin/tool is not an executable: %v", dir, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "tool")); err != nil || l != "bin/tool" {
		r.t.Fatalf("%s/tool: link %q, %v", dir, l, err)
	}
}

func TestSourcesFromDirectory(t *testing.T) {
	r := newResolver(t)
	dest := filepath.Join(r.dir, "out", "proj")
	out, rc := r.do(r.srcs, "unpack", "proj", dest)
	if rc != 0 || !strings.Contains(out, "from GPUSLICE_SOURCES") {
		t.Fatalf("unpack: exit %d: %s", rc, out)
	}
	r.unpacked(dest)
	if _, err := os.Stat(filepath.Join(r.cache, "sources", r.archive)); err == nil {
		t.Error("an archive read from GPUSLICE_SOURCES was copied into the cache")
	}
	if out, rc := r.do(r.srcs, "have", "proj"); rc != 0 {
		t.Errorf("have: exit %d: %s", rc, out)
	}
}

// A damaged archive, or one that is not the pinned one, fails with its
// reason: the resolver never passes over it for the URL, although the URL
// would serve the right contents.
func TestSourcesDirectoryChecked(t *testing.T) {
	r := newResolver(t)
	dest := filepath.Join(r.dir, "out", "proj")

	r.writeSums(strings.Repeat("0", 64))
	out, rc := r.do(r.srcs, "unpack", "proj", dest)
	if rc != 1 || !strings.Contains(out, "SHA256SUMS says "+strings.Repeat("0", 64)) {
		t.Errorf("archive unlike its SHA256SUMS: exit %d: %s", rc, out)
	}
	if out, rc := r.do(r.srcs, "have", "proj"); rc != 1 || !strings.Contains(out, "damaged") {
		t.Errorf("have, archive unlike its SHA256SUMS: exit %d: %s", rc, out)
	}

	// Listed and whole, but another archive than the pinned one.
	other := filepath.Join(r.dir, "other")
	run(t, "cp", "-a", r.tree, other)
	if err := os.WriteFile(filepath.Join(other, "README"), []byte("not the pinned project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-czf", filepath.Join(r.srcs, r.archive), "-C", r.dir, "other")
	r.writeSums(fileSHA256(t, filepath.Join(r.srcs, r.archive)))
	out, rc = r.do(r.srcs, "unpack", "proj", dest)
	if rc != 1 || !strings.Contains(out, "is not the pinned "+r.sum) {
		t.Errorf("archive other than the pin: exit %d: %s", rc, out)
	}

	if err := os.Remove(filepath.Join(r.srcs, "SHA256SUMS")); err != nil {
		t.Fatal(err)
	}
	out, rc = r.do(r.srcs, "unpack", "proj", dest)
	if rc != 1 || !strings.Contains(out, "not listed in") {
		t.Errorf("no SHA256SUMS: exit %d: %s", rc, out)
	}
	if _, err := os.Stat(dest); err == nil {
		t.Errorf("%s was made from an archive that failed its check", dest)
	}
}

// Without the directory the archive comes from the URL, is checked by its
// contents (another top folder and compression than the pinned archive)
// and kept in the cache, which serves the next run without the URL.
func TestSourcesFromURLThenCache(t *testing.T) {
	r := newResolver(t)
	dest := filepath.Join(r.dir, "out", "proj")
	out, rc := r.do("", "unpack", "proj", dest)
	if rc != 0 || !strings.Contains(out, "downloaded "+r.url) {
		t.Fatalf("unpack from the URL: exit %d: %s", rc, out)
	}
	r.unpacked(dest)
	if _, err := os.Stat(filepath.Join(r.cache, "sources", r.archive)); err != nil {
		t.Fatalf("the download is not in the cache: %v", err)
	}
	if out, rc := r.do("", "have", "proj"); rc != 0 {
		t.Errorf("have, from the cache: exit %d: %s", rc, out)
	}

	r.writeTable("file://" + filepath.Join(r.dir, "gone.tar.gz"))
	if err := os.RemoveAll(dest); err != nil {
		t.Fatal(err)
	}
	out, rc = r.do("", "unpack", "proj", dest)
	if rc != 0 || !strings.Contains(out, "from the cache") {
		t.Fatalf("unpack from the cache: exit %d: %s", rc, out)
	}
	r.unpacked(dest)
}

// A URL serving other contents fails and leaves nothing in the cache.
func TestSourcesURLChecked(t *testing.T) {
	r := newResolver(t)
	bad := filepath.Join(r.dir, "bad")
	run(t, "cp", "-a", r.tree, bad)
	if err := os.WriteFile(filepath.Join(bad, "bin", "tool"), []byte("#!/bin/sh\necho changed\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-czf", filepath.Join(r.dir, "bad.tar.gz"), "-C", r.dir, "bad")
	r.writeTable("file://" + filepath.Join(r.dir, "bad.tar.gz"))
	out, rc := r.do("", "unpack", "proj", filepath.Join(r.dir, "out", "proj"))
	if rc != 1 || !strings.Contains(out, "does not hold the pinned source") {
		t.Errorf("unpack from a URL with other contents: exit %d: %s", rc, out)
	}
	if _, err := os.Stat(filepath.Join(r.cache, "sources", r.archive)); err == nil {
		t.Error("other contents were kept in the cache")
	}
}

// With no source at all: exit status 3 and one line naming the archive,
// the places looked in and the URL (the builds write it to UNAVAILABLE,
// and the tests skip with it).
func TestSourcesMissingSaysWhat(t *testing.T) {
	r := newResolver(t)
	r.writeTable("file://" + filepath.Join(r.dir, "gone.tar.gz"))
	out, rc := r.do("", "unpack", "proj", filepath.Join(r.dir, "out", "proj"))
	if rc != 3 {
		t.Fatalf("exit %d, want 3: %s", rc, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "proj: no source") ||
		!strings.Contains(lines[0], filepath.Join(r.cache, "sources")) || !strings.Contains(lines[0], "gone.tar.gz") {
		t.Errorf("want one line naming the cache and the URL, got: %q", out)
	}
	if out, rc := r.do("", "have", "proj"); rc != 1 || !strings.Contains(out, r.archive) {
		t.Errorf("have: exit %d: %s", rc, out)
	}
}
