package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// gpuslice slurm-plugin: the packages carry the SPANK plugin built for each
// supported Slurm release; this links the one for the release the host runs
// where Slurm looks for plugins and enables its plugstack.conf line, or, when
// none matches, removes both so that Slurm's commands keep working.

var slurmPluginCommand = command{"slurm-plugin", "[flags]", "enable the SPANK plugin built for this host's Slurm release",
	"A SPANK plugin loads only into the Slurm release it was built for. The packages carry one plugin per\n" +
		"supported release (" + spankPluginsDir + "/RELEASE/gpuslice.so); this command reads the release\n" +
		"of Slurm's own plugins in its PluginDir (PluginDir of slurm.conf, else the first of the packaged\n" +
		"Slurm's directories that holds plugins), links the matching plugin there as gpuslice.so and links\n" +
		spankConfFile + " (the plugin's line, with its arguments) into plugstack.conf.d next to\n" +
		"Slurm's plugstack.conf, which it creates with that include when there is none. When no plugin\n" +
		"matches (no Slurm, an unsupported release, a plugin needing a newer C library) it removes both\n" +
		"links and says so in one line: Slurm's commands keep working, without --gpu-mem. The packages run\n" +
		"it when installed and after each Slurm upgrade; run it after installing or upgrading Slurm any\n" +
		"other way. Exit status 0: enabled; 2: not enabled; 6: an error.", slurmPluginCmd}

const (
	spankPluginName  = "gpuslice.so"
	spankPluginsDir  = "/usr/lib/gpuslice/spank" // RELEASE/gpuslice.so
	spankConfFile    = "/etc/gpuslice/plugstack.conf"
	defaultSlurmConf = "/etc/slurm/slurm.conf"
)

// pluginSetup is one run of slurm-plugin. Paths are as the host sees them
// (as Slurm does); at() places them under root.
type pluginSetup struct {
	root      string
	pluginDir string // --plugin-dir, "" to find it
	slurmConf string
	goarch    string
	quiet     bool
	stdout    io.Writer
	stderr    io.Writer
}

func slurmPluginCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	s := &pluginSetup{goarch: runtime.GOARCH, stdout: e.stdout, stderr: e.stderr}
	fs.StringVar(&s.root, "root", "/", "act on the system installed under this directory (an image being built)")
	fs.StringVar(&s.pluginDir, "plugin-dir", "", "Slurm's PluginDir (default: PluginDir of slurm.conf, else the packaged Slurm's)")
	disable := fs.Bool("disable", false, "remove the links (the packages do when they are removed)")
	fs.BoolVar(&s.quiet, "quiet", false, "print nothing when nothing changed (package scripts and triggers)")
	return func(args []string) error {
		if len(args) != 0 {
			return usagef("slurm-plugin takes no arguments")
		}
		s.slurmConf = defaultSlurmConf
		if v := e.getenv("SLURM_CONF"); v != "" {
			s.slurmConf = v
		}
		if *disable {
			return s.disable()
		}
		return s.enable()
	}
}

func (s *pluginSetup) at(path string) string { return filepath.Join(s.root, path) }

// slurmConfig holds what slurm.conf says about plugins.
type slurmConfig struct {
	pluginDirs []string
	plugStack  string
}

func (s *pluginSetup) readSlurmConf() (slurmConfig, error) {
	c := slurmConfig{plugStack: filepath.Join(filepath.Dir(s.slurmConf), "plugstack.conf")}
	f, err := os.Open(s.at(s.slurmConf))
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "plugindir":
			c.pluginDirs = filepath.SplitList(v)
		case "plugstackconfig":
			c.plugStack = v
		}
	}
	return c, sc.Err()
}

// pluginDirs are the directories to look for Slurm in, in order: --plugin-dir
// alone, else slurm.conf's PluginDir, then the PluginDir a Slurm built
// from source with SchedMD's defaults has when its slurm.conf is
// PREFIX/etc/slurm.conf (PREFIX/lib/slurm: the Slurm whose slurm.conf is
// named comes before any other the host also has), then where packaged
// Slurm keeps its plugins (Debian's multiarch directory, SchedMD's,
// OpenHPC's and EPEL's RPMs, a source build's default prefix).
func (s *pluginSetup) pluginDirs(c slurmConfig) []string {
	if s.pluginDir != "" {
		return []string{filepath.Clean(s.pluginDir)}
	}
	dirs := slices.Clone(c.pluginDirs)
	if etc := filepath.Dir(filepath.Clean(s.slurmConf)); filepath.Base(etc) == "etc" && filepath.Dir(etc) != "/" {
		prefix := filepath.Dir(etc)
		dirs = append(dirs, filepath.Join(prefix, "lib", "slurm"), filepath.Join(prefix, "lib64", "slurm"))
	}
	if t := multiarch(s.goarch); t != "" {
		dirs = append(dirs, "/usr/lib/"+t+"/slurm-wlm")
	}
	dirs = append(dirs, "/usr/lib64/slurm", "/usr/lib/slurm", "/usr/local/lib/slurm")
	var out []string
	for _, d := range dirs {
		if d = filepath.Clean(d); filepath.IsAbs(d) && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

func multiarch(goarch string) string {
	return map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu"}[goarch]
}

// includePath is where the plugin's line is linked: plugstack.conf.d next to
// plugstack.conf.
func includePath(c slurmConfig) string {
	return filepath.Join(filepath.Dir(c.plugStack), "plugstack.conf.d", "gpuslice.conf")
}

// packaged lists the plugins of the package, one per release.
func (s *pluginSetup) packaged() ([]slurmPlugin, error) {
	paths, err := filepath.Glob(s.at(filepath.Join(spankPluginsDir, "*", spankPluginName)))
	if err != nil {
		return nil, err
	}
	var out []slurmPlugin
	for _, path := range paths {
		p, err := readSlurmPlugin(path)
		if err != nil {
			return nil, fmt.Errorf("packaged plugin: %w", err)
		}
		p.path = strings.TrimPrefix(path, filepath.Clean(s.root))
		if !strings.HasPrefix(p.path, "/") {
			p.path = "/" + p.path
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b slurmPlugin) int { return int(a.version>>8) - int(b.version>>8) })
	return out, nil
}

func (s *pluginSetup) enable() error {
	c, err := s.readSlurmConf()
	if err != nil {
		return fmt.Errorf("%s: %w", s.slurmConf, err)
	}
	dirs := s.pluginDirs(c)
	var dir string
	var plugins []slurmPlugin
	for _, d := range dirs {
		if plugins = slurmPluginsIn(s.at(d)); len(plugins) > 0 {
			dir = d
			break
		}
	}
	if dir == "" {
		return s.off(c, dirs, "no Slurm found (no Slurm plugins in "+strings.Join(dirs, ", ")+")")
	}
	version, ok, detail := hostRelease(plugins)
	if !ok {
		return s.off(c, dirs, fmt.Sprintf("cannot tell Slurm's release from its plugins in %s (%s)", dir, detail))
	}
	rel := slurmRelease(version)
	have, err := s.packaged()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(have, func(p slurmPlugin) bool { return sameRelease(p.version, version) })
	if i < 0 {
		var rels []string
		for _, p := range have {
			rels = append(rels, p.release())
		}
		return s.off(c, dirs, fmt.Sprintf("Slurm %s (%s) is not supported: the package has plugins for %s",
			rel, dir, orNone(strings.Join(rels, ", "))))
	}
	plugin := have[i]
	if lack, libc := s.libcLacks(plugin); len(lack) > 0 {
		return s.off(c, dirs, fmt.Sprintf("Slurm %s (%s): its plugin needs %s, which this host's C library (%s) lacks",
			rel, dir, strings.Join(lack, ", "), libc))
	}
	if _, err := os.Stat(s.at(spankConfFile)); err != nil {
		return s.off(c, dirs, fmt.Sprintf("Slurm %s (%s): the plugin's line %s is missing (%v)", rel, dir, spankConfFile, err))
	}

	link := filepath.Join(dir, spankPluginName)
	was := s.linkedRelease(link)
	changed, err := s.link(link, plugin.path, spankPluginsDir)
	if errors.Is(err, errNotOurs) {
		return s.off(c, dirs, fmt.Sprintf("Slurm %s (%s): %s is not the package's link (a plugin installed by hand?), left as is",
			rel, dir, link))
	}
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if d != dir {
			if removed, err := s.unlinkOurs(filepath.Join(d, spankPluginName), spankPluginsDir); err != nil {
				return err
			} else if removed {
				changed = true
			}
		}
	}
	inc := includePath(c)
	var notes []string
	if ch, err := s.link(inc, spankConfFile, spankConfFile); errors.Is(err, errNotOurs) {
		notes = append(notes, inc+" is the site's own file, kept")
	} else if err != nil {
		return err
	} else if ch {
		changed = true
	}
	if note, err := s.plugStackIncludes(c, inc); err != nil {
		return err
	} else if note != "" {
		notes = append(notes, note)
		changed = true
	}
	if s.quiet && !changed {
		return nil
	}
	msg := fmt.Sprintf("gpuslice: Slurm %s (%s): SPANK plugin for %s enabled", rel, dir, plugin.release())
	if now := filepath.Base(filepath.Dir(plugin.path)); was != "" && was != now {
		msg += " (was the one for " + was + ")"
	}
	for _, n := range notes {
		msg += "; " + n
	}
	fmt.Fprintln(s.stdout, msg)
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "no release"
	}
	return s
}

// off removes the links and says why in one line; exit status 2.
func (s *pluginSetup) off(c slurmConfig, dirs []string, why string) error {
	removed, kept, err := s.removeLinks(c, dirs)
	if err != nil {
		return err
	}
	state := "not enabled"
	if removed {
		state = "disabled"
	}
	if !s.quiet || removed {
		msg := "gpuslice: " + why + ": SPANK plugin " + state + ", Slurm's commands work without --gpu-mem"
		if kept != "" {
			msg = "gpuslice: " + why + ": SPANK plugin not enabled, but " + kept + " (not the package's link) still loads it"
		}
		fmt.Fprintln(s.stderr, msg)
	}
	return childExit(ExitNotFound)
}

func (s *pluginSetup) disable() error {
	c, err := s.readSlurmConf()
	if err != nil {
		return fmt.Errorf("%s: %w", s.slurmConf, err)
	}
	removed, kept, err := s.removeLinks(c, s.pluginDirs(c))
	if err != nil {
		return err
	}
	switch {
	case kept != "":
		fmt.Fprintf(s.stderr, "gpuslice: SPANK plugin disabled, but %s (not the package's link) still loads it\n", kept)
	case removed || !s.quiet:
		fmt.Fprintln(s.stdout, "gpuslice: SPANK plugin disabled")
	}
	return nil
}

// removeLinks removes the plugstack.conf.d link first (Slurm then no longer
// asks for the plugin), then the plugin's links. kept names a plugstack.conf.d
// file of the same name that is not the package's link.
func (s *pluginSetup) removeLinks(c slurmConfig, dirs []string) (removed bool, kept string, err error) {
	inc := includePath(c)
	removed, err = s.unlinkOurs(inc, spankConfFile)
	if errors.Is(err, errNotOurs) {
		kept, err = inc, nil
	}
	if err != nil {
		return removed, kept, err
	}
	for _, d := range dirs {
		r, err := s.unlinkOurs(filepath.Join(d, spankPluginName), spankPluginsDir)
		if err != nil && !errors.Is(err, errNotOurs) {
			return removed, kept, err
		}
		removed = removed || r
	}
	return removed, kept, nil
}
