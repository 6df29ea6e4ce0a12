package cli

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// What gpuslice slurm-plugin reads from shared objects: the release a Slurm
// plugin was built for, and the C library versions a plugin needs and a C
// library defines.

// slurmPlugin is what Slurm's loader checks in a plugin: plugin_type
// ("auth/munge", "spank") and plugin_version (the SLURM_VERSION_NUMBER of
// the headers it was built against; it loads only into that major.minor).
type slurmPlugin struct {
	path    string
	typ     string
	version uint32
}

// release is the plugin's major.minor, e.g. "24.05".
func (p slurmPlugin) release() string { return slurmRelease(p.version) }

func slurmRelease(v uint32) string { return fmt.Sprintf("%d.%02d", v>>16&0xff, v>>8&0xff) }

// sameRelease: Slurm loads a plugin when major and minor match.
func sameRelease(a, b uint32) bool { return a&0xffff00 == b&0xffff00 }

// errNotPlugin: the file is a shared object but not a Slurm plugin.
var errNotPlugin = errors.New("not a Slurm plugin (no plugin_version)")

// readSlurmPlugin reads plugin_type and plugin_version from a plugin.
func readSlurmPlugin(path string) (slurmPlugin, error) {
	p := slurmPlugin{path: path}
	f, err := elf.Open(path)
	if err != nil {
		return p, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	found := false
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || (s.Name != "plugin_type" && s.Name != "plugin_version") {
			continue
		}
		b, err := symbolData(f, s)
		if err != nil {
			return p, fmt.Errorf("%s: %s: %w", path, s.Name, err)
		}
		if s.Name == "plugin_version" {
			if len(b) != 4 {
				return p, fmt.Errorf("%s: plugin_version has %d bytes, want 4", path, len(b))
			}
			p.version = f.ByteOrder.Uint32(b)
			found = true
		} else if i := bytes.IndexByte(b, 0); i >= 0 {
			// const char plugin_type[]: the string itself (a pointer,
			// which no Slurm plugin uses, would read as garbage and is
			// only used to tell SPANK plugins apart).
			p.typ = string(b[:i])
		}
	}
	if !found {
		return p, errNotPlugin
	}
	return p, nil
}

// symbolData is the initial value of a defined data symbol.
func symbolData(f *elf.File, s elf.Symbol) ([]byte, error) {
	if int(s.Section) >= len(f.Sections) {
		return nil, fmt.Errorf("section %d out of range", s.Section)
	}
	sec := f.Sections[s.Section]
	if sec.Type == elf.SHT_NOBITS {
		return make([]byte, s.Size), nil
	}
	if s.Value < sec.Addr || s.Value+s.Size > sec.Addr+sec.Size || s.Size > 1<<16 {
		return nil, fmt.Errorf("outside its section %s", sec.Name)
	}
	b := make([]byte, s.Size)
	if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
		return nil, err
	}
	return b, nil
}

// slurmPluginsIn reads the Slurm plugins of a directory: Slurm's own (not
// SPANK plugins, which sites add and may leave behind from an older
// release), and not gpuslice's link.
func slurmPluginsIn(dir string) []slurmPlugin {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.so"))
	var out []slurmPlugin
	for _, path := range paths {
		if filepath.Base(path) == spankPluginName {
			continue
		}
		if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
			continue
		}
		p, err := readSlurmPlugin(path)
		if err != nil || p.typ == "spank" {
			continue
		}
		out = append(out, p)
	}
	return out
}

// hostRelease is the release most of Slurm's plugins in dir were built for
// (they all are, unless an upgrade left some behind), with how many plugins
// say so; ok is false when dir holds none or two releases tie.
func hostRelease(plugins []slurmPlugin) (version uint32, ok bool, detail string) {
	count := map[uint32]int{}
	first := map[uint32]uint32{}
	for _, p := range plugins {
		k := p.version & 0xffff00
		if count[k] == 0 {
			first[k] = p.version
		}
		count[k]++
	}
	keys := make([]uint32, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return count[keys[i]] > count[keys[j]] || (count[keys[i]] == count[keys[j]] && keys[i] < keys[j])
	})
	if len(keys) == 0 {
		return 0, false, ""
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d of %s", count[k], slurmRelease(k)))
	}
	detail = strings.Join(parts, ", ")
	if len(keys) > 1 && count[keys[0]] == count[keys[1]] {
		return 0, false, detail
	}
	return first[keys[0]], true, detail
}

// glibcNeeds lists the GLIBC_x.y versions a shared object needs from the C
// library.
func glibcNeeds(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	for _, n := range needs {
		if n.Name != "libc.so.6" {
			continue
		}
		for _, d := range n.Needs {
			out = append(out, d.Dep)
		}
	}
	return out, nil
}

// glibcDefines is the set of symbol versions a C library defines.
func glibcDefines(path string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	defs, err := f.DynamicVersions()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]bool{}
	for _, d := range defs {
		out[d.Name] = true
	}
	return out, nil
}
