package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The maintainer scripts, as packaged, are run with every argument list the
// package managers use, with and without a running systemd. They run in a
// private mount namespace with a tmpfs over /run (so "systemd is running"
// means: /run/systemd/system exists there) and with systemctl,
// deb-systemd-helper, deb-systemd-invoke and gpuslice replaced by stubs
// that record their arguments; nothing on the machine is touched.

// scriptFromPackage extracts one maintainer script from a built package.
func scriptFromPackage(t *testing.T, format, pkg, name string) string {
	t.Helper()
	dir := t.TempDir()
	if format == "deb" {
		run(t, nil, "dpkg-deb", "--control", pkg, dir)
		return filepath.Join(dir, name)
	}
	var body, prog string
	if i, ok := strings.CutPrefix(name, "TRIGGER"); ok {
		// The i-th trigger's script: TRIGGER0, TRIGGER1, ...
		const sep = "\n--gpuslice-test--\n"
		n, _ := strconv.Atoi(i)
		scripts := strings.Split(run(t, nil, "rpm", "-qp", "--qf", "[%{TRIGGERSCRIPTS}"+sep+"]", pkg), sep)
		progs := strings.Split(run(t, nil, "rpm", "-qp", "--qf", "[%{TRIGGERSCRIPTPROG}"+sep+"]", pkg), sep)
		if n >= len(scripts)-1 || n >= len(progs)-1 {
			t.Fatalf("%s has %d trigger scripts, no %s", pkg, len(scripts)-1, name)
		}
		body, prog = scripts[n], progs[n]
	} else {
		body = run(t, nil, "rpm", "-qp", "--qf", "%{"+name+"}", pkg)
		prog = strings.TrimSpace(run(t, nil, "rpm", "-qp", "--qf", "%{"+name+"PROG}", pkg))
	}
	if prog != "/bin/sh" {
		t.Fatalf("%s scriptlet interpreter %q, want /bin/sh", name, prog)
	}
	path := filepath.Join(dir, strings.ToLower(name))
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// runScript runs script with args and returns the stub calls, in order.
func runScript(t *testing.T, script string, systemdRunning bool, args ...string) []string {
	t.Helper()
	dir := t.TempDir()
	stubs := filepath.Join(dir, "bin")
	calls := filepath.Join(dir, "calls")
	if err := os.Mkdir(stubs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"systemctl", "deb-systemd-helper", "deb-systemd-invoke", "gpuslice"} {
		stub := "#!/bin/sh\necho \"" + name + " $*\" >>'" + calls + "'\nexit 0\n"
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	running := "0"
	if systemdRunning {
		running = "1"
	}
	inner := `mount -t tmpfs gpuslice-test /run || exit 97
if [ "$SYSTEMD_RUNNING" = 1 ]; then mkdir -p /run/systemd/system || exit 97; fi
exec /bin/sh "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private",
		"/bin/sh", "-c", inner, "sh", script}, args...)...)
	cmd.Env = []string{"PATH=" + stubs + ":/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_RUNNING=" + running}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v (systemd running: %v): %v\n%s", filepath.Base(script), args, systemdRunning, err, out)
	}
	if len(out) > 0 {
		t.Errorf("%s %v printed %q; maintainer scripts stay quiet", filepath.Base(script), args, out)
	}
	b, err := os.ReadFile(calls)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return lines(string(b))
}

func TestMaintainerScripts(t *testing.T) {
	need(t, "unshare", "dpkg-deb", "rpm")
	if os.Getuid() != 0 {
		t.Skip("needs root (mount namespace)")
	}
	p := packages(t)
	if p.RPM == "" {
		t.Fatal("gpuslice.rpm was not built")
	}
	const unit = "gpusliced.service"
	dshEnable := []string{
		"deb-systemd-helper unmask " + unit,
		"deb-systemd-helper --quiet was-enabled " + unit,
		"deb-systemd-helper enable " + unit,
	}
	// The SPANK plugin: selected at install (saying which in one line),
	// quietly (a change only) on upgrade and each trigger, disabled at
	// removal.
	const (
		sel      = "gpuslice slurm-plugin"
		selQuiet = "gpuslice slurm-plugin --quiet"
		disable  = "gpuslice slurm-plugin --disable --quiet"
	)
	with := func(calls []string, more ...string) []string { return append(slices.Clone(calls), more...) }
	cases := []struct {
		name    string
		format  string
		script  string // deb: control file name; rpm: header tag
		args    []string
		running bool
		want    []string
	}{
		// Debian: enable and start on install, restart on upgrade (dh_installsystemd).
		{"deb install", "deb", "postinst", []string{"configure", ""}, true,
			with(dshEnable, "systemctl --system daemon-reload", "deb-systemd-invoke start "+unit, sel)},
		{"deb upgrade", "deb", "postinst", []string{"configure", "0.1.0-1"}, true,
			with(dshEnable, "systemctl --system daemon-reload", "deb-systemd-invoke restart "+unit, selQuiet)},
		{"deb install without systemd", "deb", "postinst", []string{"configure", ""}, false, with(dshEnable, sel)},
		{"deb upgrade without systemd", "deb", "postinst", []string{"configure", "0.1.0-1"}, false, with(dshEnable, selQuiet)},
		{"deb abort-upgrade", "deb", "postinst", []string{"abort-upgrade", "0.1.1-1"}, true,
			with(dshEnable, "systemctl --system daemon-reload", "deb-systemd-invoke restart "+unit, selQuiet)},
		{"deb Slurm's plugin directory changed", "deb", "postinst", []string{"triggered", debPluginDir}, true,
			[]string{selQuiet}},
		{"deb prerm remove", "deb", "prerm", []string{"remove"}, true, []string{"deb-systemd-invoke stop " + unit, disable}},
		{"deb prerm upgrade keeps it running", "deb", "prerm", []string{"upgrade", "0.1.1-1"}, true, nil},
		{"deb prerm remove without systemd", "deb", "prerm", []string{"remove"}, false, []string{disable}},
		{"deb postrm remove", "deb", "postrm", []string{"remove"}, true,
			[]string{"systemctl --system daemon-reload", "deb-systemd-helper mask " + unit}},
		{"deb postrm remove without systemd", "deb", "postrm", []string{"remove"}, false,
			[]string{"deb-systemd-helper mask " + unit}},
		{"deb postrm upgrade", "deb", "postrm", []string{"upgrade", "0.1.1-1"}, true, nil},

		// RPM: preset on install, never start; try-restart on upgrade; stop on erase.
		{"rpm install", "rpm", "POSTIN", []string{"1"}, true,
			[]string{"systemctl daemon-reload", "systemctl --no-reload preset " + unit, sel}},
		{"rpm upgrade post", "rpm", "POSTIN", []string{"2"}, true, []string{"systemctl daemon-reload", selQuiet}},
		{"rpm install without systemd", "rpm", "POSTIN", []string{"1"}, false, []string{sel}},
		{"rpm posttrans", "rpm", "POSTTRANS", nil, true, []string{selQuiet}},
		{"rpm slurm installed or upgraded", "rpm", "TRIGGER0", []string{"1", "1"}, true, []string{selQuiet}},
		{"rpm slurm upgraded or removed", "rpm", "TRIGGER1", []string{"1", "0"}, true, []string{selQuiet}},
		{"rpm erase preun", "rpm", "PREUN", []string{"0"}, true, []string{"systemctl --no-reload disable --now " + unit, disable}},
		{"rpm upgrade preun", "rpm", "PREUN", []string{"1"}, true, nil},
		{"rpm erase preun without systemd", "rpm", "PREUN", []string{"0"}, false, []string{disable}},
		{"rpm upgrade postun", "rpm", "POSTUN", []string{"1"}, true,
			[]string{"systemctl daemon-reload", "systemctl try-restart " + unit}},
		{"rpm erase postun", "rpm", "POSTUN", []string{"0"}, true, []string{"systemctl daemon-reload"}},
		{"rpm upgrade postun without systemd", "rpm", "POSTUN", []string{"1"}, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pkg := p.Deb
			if c.format == "rpm" {
				pkg = p.RPM
			}
			script := scriptFromPackage(t, c.format, pkg, c.script)
			got := runScript(t, script, c.running, c.args...)
			if !slices.Equal(got, c.want) {
				t.Errorf("calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
			for _, call := range got {
				if c.format == "rpm" && len(c.args) > 0 && c.args[0] != "0" &&
					(strings.HasPrefix(call, "systemctl start") || strings.HasPrefix(call, "systemctl enable")) {
					t.Errorf("RPM scriptlet starts or enables the service: %q", call)
				}
			}
		})
	}
}
