package spanktest

import (
	"debug/elf"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The built plugin exports exactly what Slurm looks up (checked against
// Slurm 22.05: plugin_name, plugin_type and plugin_version are required,
// the callbacks are looked up by name) and nothing else.
func TestPluginExports(t *testing.T) {
	so := testenv.Artifact(t, filepath.Join("spank", "gpuslice.so"))
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
			exported = append(exported, s.Name)
		}
	}
	sort.Strings(exported)
	want := []string{"plugin_name", "plugin_type", "plugin_version",
		"slurm_spank_exit", "slurm_spank_init", "slurm_spank_init_post_opt", "slurm_spank_task_exit",
		"slurm_spank_task_init", "slurm_spank_user_init"}
	if strings.Join(exported, " ") != strings.Join(want, " ") {
		t.Fatalf("%s exports %v, want %v", so, exported, want)
	}

	// Hardened link (-z relro -z now): bindings resolved at load time.
	flags, err := f.DynValue(elf.DT_FLAGS)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) != 1 || flags[0]&uint64(elf.DF_BIND_NOW) == 0 {
		t.Errorf("%s is not linked with -z now (DT_FLAGS %v)", so, flags)
	}
	relro := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_RELRO {
			relro = true
		}
	}
	if !relro {
		t.Errorf("%s has no GNU_RELRO segment", so)
	}
}
