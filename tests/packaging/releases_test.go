package packaging

// One .deb for Debian and Ubuntu and one .rpm carry the plugin built for
// every supported Slurm release and depend on none (installed in the
// Debian roots by installpath_test.go, each enabling its Slurm's plugin).

import (
	"debug/elf"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

// soPluginVersion reads plugin_version (the SLURM_VERSION_NUMBER Slurm
// checks at load) from a SPANK plugin.
func soPluginVersion(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("plugin %s: %v", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatalf("plugin %s: %v", path, err)
	}
	for _, s := range syms {
		if s.Name != "plugin_version" {
			continue
		}
		sec := f.Sections[s.Section]
		b, err := sec.Data()
		if err != nil || s.Value < sec.Addr || s.Value-sec.Addr+4 > uint64(len(b)) {
			t.Fatalf("plugin_version in %s: unreadable (%v)", path, err)
		}
		return binary.LittleEndian.Uint32(b[s.Value-sec.Addr:])
	}
	t.Fatalf("plugin %s exports no plugin_version", path)
	return 0
}

// Both packages carry the plugin of every release the build has, each
// built for the release its directory names, and depend on no Slurm.
func TestSlurmReleases(t *testing.T) {
	need(t, "dpkg-deb", "rpm")
	p := packages(t)
	want := buildReleases(t)
	for _, c := range []struct{ name, pkg string }{{"deb", p.Deb}, {"rpm", p.RPM}} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.name == "deb" {
				run(t, nil, "dpkg-deb", "-x", c.pkg, root)
			} else {
				rpmRoot(t, root, "--initdb")
				rpmRoot(t, root, "-i", "--nodeps", "--noscripts", c.pkg)
			}
			if got := packagedReleases(t, root); !slices.Equal(got, want) {
				t.Errorf("plugins for %v, want %v", got, want)
			}
			var deps string
			if c.name == "deb" {
				deps = debField(t, c.pkg, "Depends")
			} else {
				deps = run(t, nil, "rpm", "-qp", "--requires", c.pkg)
			}
			if strings.Contains(deps, "slurm") {
				t.Errorf("depends on Slurm: %s", deps)
			}
		})
	}
}
