package debroot

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReady(t *testing.T) {
	if os.Geteuid() != 0 {
		if err := Ready(t.TempDir()); !errors.Is(err, ErrSkip) {
			t.Fatalf("Ready without root: %v, want ErrSkip", err)
		}
		t.Skip("the other cases need root")
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		skip  bool
		ok    bool
		msg   string
	}{
		{name: "no root built", msg: "run make trixie-root"},
		{name: "archive unreachable", files: map[string]string{"UNREACHABLE": "Debian archive x unreachable\n", ".stamp": ""},
			skip: true, msg: "Debian archive x unreachable"},
		{name: "built", files: map[string]string{".stamp": ""}, ok: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			build := t.TempDir()
			if err := os.MkdirAll(filepath.Join(build, "trixie", "root"), 0o755); err != nil {
				t.Fatal(err)
			}
			for name, content := range c.files {
				if err := os.WriteFile(filepath.Join(build, "trixie", name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := Ready(build)
			switch {
			case c.ok && err != nil:
				t.Fatalf("Ready: %v", err)
			case !c.ok && err == nil:
				t.Fatal("Ready: nil, want an error")
			case !c.ok && errors.Is(err, ErrSkip) != c.skip:
				t.Fatalf("Ready: %v; skip %v, want %v", err, errors.Is(err, ErrSkip), c.skip)
			case !c.ok && !strings.Contains(err.Error(), c.msg):
				t.Fatalf("Ready: %v, want it to say %q", err, c.msg)
			}
		})
	}
}

// The binary inside gets the -test.* flags that select and report tests,
// with the values given, and no others (no profiles or output files that
// would land inside the root).
func TestTestArgs(t *testing.T) {
	for name, value := range map[string]string{"test.run": "TestX/y", "test.failfast": "true", "test.benchtime": "2s"} {
		old := flag.Lookup(name).Value.String()
		if err := flag.Set(name, value); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	args := testArgs()
	for _, want := range []string{"-test.run=TestX/y", "-test.failfast=true"} {
		if !slices.Contains(args, want) {
			t.Errorf("testArgs() = %v, lacks %s", args, want)
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-test.benchtime") {
			t.Errorf("testArgs() = %v forwards %s", args, a)
		}
	}
}
