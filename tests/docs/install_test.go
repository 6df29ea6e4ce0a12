package docs

// docs/install.md's "Without a GPU" and "Verify", run as written on a
// fakecuda node: a private gpusliced started as the section's systemd
// drop-in says, the section's commands run by bash against it, and the
// output the page shows compared with what they print.
//
// The page names installed paths (/usr/sbin/gpusliced,
// /usr/lib/gpuslice/fakecuda, /usr/libexec/gpuslice/examples, ...); the
// test maps each onto the build output or repository file the packages
// install there (packaging/nfpm/*.yaml), so a path the packages do not
// install fails the test. The daemon's sockets, directories and fakecuda
// state are private (GPUSLICE_ADMIN_SOCK, GPUSLICE_IPC_SOCK and
// FAKECUDA_STATE in the commands' environment): nothing touches
// /run/gpuslice or /dev/shm/fakecuda-default.
//
// Documented output: in a block the test runs, every whole-line comment
// ("# ...") is a line the commands print (stdout and stderr), in that
// order. Runs of blanks count as one blank; "..." stands for any text; a
// line that starts with "... " may come after other lines (any line may).
// A warning the commands print must be among the documented lines.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/installdoc"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"go.yaml.in/yaml/v3"
)

const installPage = "docs/install.md"

// clusterCommands are programs that need a Slurm cluster or systemd: a
// block or step that runs one is not run here.
var clusterCommands = map[string]bool{"srun": true, "sbatch": true, "salloc": true, "scontrol": true,
	"sacct": true, "sinfo": true, "squeue": true, "systemctl": true, "slurmd": true}

var (
	rePlaceholder = regexp.MustCompile(`<[a-z]+>`)
	reShellSep    = regexp.MustCompile(`[;|&]+`)
)

// needsCluster names the first command of cmds that needs a cluster, or
// the first with a placeholder such as <jobid> (a job's), "" if none.
func needsCluster(cmds []string) string {
	for _, c := range cmds {
		if m := rePlaceholder.FindString(c); m != "" {
			return m
		}
		for _, seg := range reShellSep.Split(c, -1) {
			if f := strings.Fields(seg); len(f) > 0 && clusterCommands[f[0]] {
				return f[0]
			}
		}
	}
	return ""
}

// squash collapses runs of blanks, as the documented lines do for
// aligned columns.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// linePattern is a documented output line as a regular expression over one
// (squashed) output line.
func linePattern(doc string) *regexp.Regexp {
	doc = squash(doc)
	if rest, ok := strings.CutPrefix(doc, "... "); ok {
		doc = rest
	}
	parts := strings.Split(doc, "...")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// matchOutput checks that the documented lines (with their page line
// numbers) appear in out in order, and that out has no warning the page
// does not show.
func matchOutput(out string, want []string, at []int) []string {
	var errs []string
	got := strings.Split(strings.TrimRight(out, "\n"), "\n")
	matched := map[int]bool{}
	next := 0
	for i, w := range want {
		re := linePattern(w)
		found := -1
		for j := next; j < len(got); j++ {
			if re.MatchString(squash(got[j])) {
				found = j
				break
			}
		}
		if found < 0 {
			errs = append(errs, fmt.Sprintf("%s:%d shows %q; no such line in the output (from output line %d on)", installPage, at[i], w, next+1))
			continue
		}
		matched[found] = true
		next = found + 1
	}
	for j, g := range got {
		if !matched[j] && strings.Contains(strings.ToLower(g), "warning") {
			errs = append(errs, fmt.Sprintf("the commands print a warning the page does not show: %q", g))
		}
	}
	return errs
}

// pathMap maps installed absolute paths to the files the packages install
// there: build outputs and repository files.
type pathMap struct {
	exact map[string]string // file or tree -> local path
	dirs  map[string]string // directory of installed files -> local directory
}

func loadPathMap(t *testing.T, root, build string) *pathMap {
	t.Helper()
	m := &pathMap{exact: map[string]string{}, dirs: map[string]string{}}
	conflict := map[string]bool{}
	for _, f := range []string{"packaging/nfpm/gpuslice.yaml", "packaging/nfpm/gpuslice-fakecuda.yaml"} {
		var cfg nfpmConfig
		if err := yaml.Unmarshal([]byte(read(t, root, f)), &cfg); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, c := range cfg.Contents {
			if c.Dst == "" || c.Src == "" || c.Type == "dir" || c.Type == "symlink" {
				continue
			}
			var src string
			switch {
			case strings.HasPrefix(c.Src, "${GPUSLICE_BUILD}/"):
				src = filepath.Join(build, strings.TrimPrefix(c.Src, "${GPUSLICE_BUILD}/"))
			case strings.Contains(c.Src, "$"):
				continue // generated while packaging
			default:
				src = filepath.Join(root, c.Src)
			}
			dst := path.Clean(c.Dst)
			m.exact[dst] = src
			if c.Type == "tree" || path.Base(dst) != filepath.Base(src) {
				continue
			}
			d, s := path.Dir(dst), filepath.Dir(src)
			if old, ok := m.dirs[d]; ok && old != s {
				conflict[d] = true
			}
			m.dirs[d] = s
		}
	}
	for d := range conflict {
		delete(m.dirs, d)
	}
	return m
}

// local maps one installed path; ok is false when no package installs it.
func (m *pathMap) local(p string) (string, bool) {
	p = path.Clean(p)
	if s, ok := m.exact[p]; ok {
		return s, true
	}
	if s, ok := m.dirs[p]; ok {
		return s, true
	}
	// The longest installed tree or directory holding p.
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		if s, ok := m.exact[d]; ok {
			return filepath.Join(s, strings.TrimPrefix(p, d+"/")), true
		}
		if s, ok := m.dirs[d]; ok {
			return filepath.Join(s, strings.TrimPrefix(p, d+"/")), true
		}
	}
	return "", false
}

// reInstalledPath finds absolute paths under /usr, /etc and /lib: at the
// start of a word, an assignment's value or a list item.
var reInstalledPath = regexp.MustCompile(`(?:^|[\s="':])(/(?:usr|etc|lib)/[^\s"';:|&)]*)`)

// rewrite maps every installed path in text; unknown ones are errors.
func (m *pathMap) rewrite(text string) (string, []string) {
	var bad []string
	var b strings.Builder
	last := 0
	for _, ix := range reInstalledPath.FindAllStringSubmatchIndex(text, -1) {
		p := text[ix[2]:ix[3]]
		b.WriteString(text[last:ix[2]])
		last = ix[3]
		s, ok := m.local(strings.TrimSuffix(p, "/"))
		if !ok {
			bad = append(bad, p)
			b.WriteString(p)
			continue
		}
		if strings.HasSuffix(p, "/") {
			s += "/"
		}
		b.WriteString(s)
	}
	b.WriteString(text[last:])
	return b.String(), bad
}

// docNode is a fakecuda node set up as install.md "Without a GPU" says.
type docNode struct {
	root, build string
	paths       *pathMap
	blocks      []installdoc.Block
	dropin      installdoc.Block
	daemon      *testenv.Daemon
	config      string // the packaged gpusliced.yaml (repository file)
	devices     string // the drop-in's FAKECUDA_DEVICES
}

// requireArtifacts skips the test when a build output it runs is missing.
func requireArtifacts(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: gpuslice run creates its session through gpusliced's admin socket, which is root's")
	}
	build, err := testenv.FindBuildDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	for _, a := range []string{"bin/gpusliced", "bin/gpuslice", "bin/gpuslice-ctxprobe", "lib/libgpuslice.so",
		"lib/libcuda.so.1", "lib/libnvidia-ml.so.1", "examples/target_app"} {
		if _, err := os.Stat(filepath.Join(build, a)); err != nil {
			t.Skipf("build output %s is missing: run `make test-docs` (it builds go-build, fakecuda, interceptor, ctxprobe) or `make build`", filepath.Join(build, a))
		}
	}
	return testenv.BuildDir(t)
}

// dropinConfig reads the systemd drop-in: the environment and the command
// line of its last ExecStart.
func dropinConfig(t *testing.T, b installdoc.Block) (env []string, argv []string) {
	t.Helper()
	env, argv, err := b.Dropin()
	if err != nil {
		t.Fatalf("%s: %v", installPage, err)
	}
	return env, argv
}

func startDocNode(t *testing.T) *docNode {
	t.Helper()
	build := requireArtifacts(t)
	root := testenv.RepoRoot(t)
	n := &docNode{root: root, build: build, paths: loadPathMap(t, root, build)}
	blocks, err := installdoc.Section(read(t, root, installPage), "Without a GPU")
	if err != nil {
		t.Fatalf("%s: %v", installPage, err)
	}
	n.blocks = blocks
	var dropins []installdoc.Block
	for _, b := range blocks {
		if b.Info == "ini" && strings.Contains(b.Body, "[Service]") {
			dropins = append(dropins, b)
		}
	}
	if len(dropins) != 1 {
		t.Fatalf("%s \"Without a GPU\": want one ```ini block with the [Service] drop-in, found %d", installPage, len(dropins))
	}
	n.dropin = dropins[0]
	env, argv := dropinConfig(t, n.dropin)
	mapped, bad := n.paths.rewrite(strings.Join(argv, "\n"))
	if len(bad) > 0 {
		t.Fatalf("%s:%d: the drop-in names %v, which no package installs", installPage, n.dropin.Line, bad)
	}
	argv = strings.Split(mapped, "\n")
	if argv[0] != filepath.Join(build, "bin", "gpusliced") {
		t.Fatalf("%s:%d: the drop-in's ExecStart runs %s, not the packaged gpusliced", installPage, n.dropin.Line, argv[0])
	}
	args := argv[1:]
	var extraEnv []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "FAKECUDA_DEVICES":
			n.devices = v
		case "FAKECUDA_STATE":
			// The test's node has a private state.
		default:
			kv, bad = n.paths.rewrite(kv)
			if len(bad) > 0 {
				t.Fatalf("%s:%d: the drop-in names %v, which no package installs", installPage, n.dropin.Line, bad)
			}
			extraEnv = append(extraEnv, kv)
		}
	}
	if n.devices == "" {
		t.Fatalf("%s:%d: the drop-in sets no FAKECUDA_DEVICES", installPage, n.dropin.Line)
	}
	// What the daemon reads: the drop-in's flags over the packaged
	// configuration (installed paths in it mapped too).
	cfg, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatalf("%s:%d: gpusliced refuses the drop-in's command line: %v", installPage, n.dropin.Line, err)
	}
	n.config = cfg.File
	probe := cfg.ContextProbe
	if probe != "" {
		if p, ok := n.paths.local(probe); ok {
			probe = p
		}
	}
	// testenv passes its own private directories and sockets and turns the
	// context probe off; the drop-in's flags follow (they win), then the
	// probe the configuration names.
	n.daemon = testenv.StartDaemon(t, testenv.DaemonOptions{
		Devices:   n.devices,
		CtxBytes:  "default",
		ExtraEnv:  extraEnv,
		ExtraArgs: append(args, "--context-probe", probe),
	})
	n.waitContextProbe(t)
	return n
}

// waitContextProbe fails the test unless gpusliced's context probe has
// measured every GPU (the drop-in must give it fakecuda's driver).
func (n *docNode) waitContextProbe(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		gpus, err := n.daemon.Client().GPUs(ctx)
		cancel()
		if err == nil {
			err = api.ContextCostsMeasured(gpus)
		}
		if err == nil {
			return
		}
		var why []string
		for _, l := range strings.Split(n.daemon.Log(), "\n") {
			if strings.Contains(l, "context probe") || strings.Contains(l, "context cost not measured") {
				why = append(why, l)
			}
		}
		if len(why) > 0 || time.Now().After(deadline) {
			t.Fatalf("%s:%d: gpusliced started as the drop-in says does not measure what a context costs (%v); "+
				"its context probe needs fakecuda's CUDA driver too (--cuda-library):\n%s",
				installPage, n.dropin.Line, err, strings.Join(why, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shellEnv is the environment the page's commands run in: a root shell on
// the node (PATH reaching the packaged commands, the packaged
// configuration) pointed at the private daemon.
func (n *docNode) shellEnv(extraPath ...string) []string {
	p := strings.Join(append(extraPath, filepath.Join(n.build, "bin"), os.Getenv("PATH")), ":")
	var env []string
	for _, kv := range testenv.BaseEnv() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+p, "GPUSLICE_CONFIG="+n.config,
		"GPUSLICE_ADMIN_SOCK="+n.daemon.AdminSock, "GPUSLICE_IPC_SOCK="+n.daemon.IPCSock,
		"FAKECUDA_STATE="+n.daemon.State)
}

var reFakecudaState = regexp.MustCompile(`FAKECUDA_STATE=\S+`)

// script is a block's commands with installed paths mapped and the node's
// fakecuda state private.
func (n *docNode) script(t *testing.T, b installdoc.Block, body string) string {
	t.Helper()
	s, bad := n.paths.rewrite(body)
	if len(bad) > 0 {
		t.Fatalf("%s:%d: the block names %v, which no package installs", installPage, b.Line, bad)
	}
	return reFakecudaState.ReplaceAllString(s, "FAKECUDA_STATE="+n.daemon.State)
}

// run runs a script with bash -e; it returns stdout and stderr together.
func (n *docNode) run(t *testing.T, script string, env []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var reDeviceFormat = regexp.MustCompile(`--device-format[ =](\S+)`)

var reAbsPath = regexp.MustCompile(`(?:^|[\s="':])(/[^\s"';:|&)]*)`)

// unmapped returns the absolute paths of a script's commands (not of its
// documented output) outside the given directories: paths of the machine
// the commands would touch.
func unmapped(script string, dirs ...string) []string {
	var out []string
	for _, l := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
	path:
		for _, m := range reAbsPath.FindAllStringSubmatch(l, -1) {
			for _, d := range dirs {
				if m[1] == d || strings.HasPrefix(m[1], d+"/") {
					continue path
				}
			}
			out = append(out, m[1])
		}
	}
	return out
}

// TestInstallWithoutGPU follows install.md "Without a GPU": gpusliced as
// the drop-in starts it (its context probe must work), then every block of
// the section that needs no Slurm cluster, run as written, printing what
// the page shows.
func TestInstallWithoutGPU(t *testing.T) {
	n := startDocNode(t)
	ran := 0
	for _, b := range n.blocks {
		if b.Info != "sh" {
			continue
		}
		cmds := b.Commands()
		// Every program on the node sees the daemon's devices.
		for _, c := range cmds {
			for _, m := range regexp.MustCompile(`FAKECUDA_DEVICES=(\S+)`).FindAllStringSubmatch(c, -1) {
				if m[1] != n.devices {
					t.Errorf("%s:%d: FAKECUDA_DEVICES=%s, but the drop-in gives gpusliced %s", installPage, b.Line, m[1], n.devices)
				}
			}
		}
		if c := needsCluster(cmds); c != "" {
			t.Logf("%s:%d: not run here: needs a Slurm cluster (%s)", installPage, b.Line, c)
			continue
		}
		ran++
		t.Run(fmt.Sprintf("line%d", b.Line), func(t *testing.T) {
			body := b.Body
			private := t.TempDir()
			// Stand-in devices go to a private directory.
			if m := reDeviceFormat.FindStringSubmatch(body); m != nil {
				dir := path.Dir(m[1])
				tmp := filepath.Join(private, "dev")
				if err := syscall.Mknod(filepath.Join(t.TempDir(), "probe"), syscall.S_IFCHR|0o600, 195<<8); err != nil {
					t.Skipf("mknod is not allowed here (%v): the block creates character devices", err)
				}
				body = strings.ReplaceAll(body, dir, tmp)
			}
			script := n.script(t, b, body)
			if p := unmapped(script, n.build, n.root, private); len(p) > 0 {
				t.Fatalf("%s:%d: the block names %v, which the test does not know how to map to a private path "+
					"(it would touch this machine's):\n%s", installPage, b.Line, p, script)
			}
			out, err := n.run(t, script, n.shellEnv())
			// The documented lines name the paths the commands use here.
			want, at := installdoc.Block{Body: script, Line: b.Line}.Expected()
			errs := matchOutput(out, want, at)
			if err != nil {
				errs = append([]string{fmt.Sprintf("the commands failed: %v", err)}, errs...)
			}
			if len(errs) > 0 {
				t.Errorf("%s:%d: the page and what its commands do differ:\n  %s\ncommands (installed paths mapped):\n%s\noutput:\n%s",
					installPage, b.Line, strings.Join(errs, "\n  "), script, out)
			}
		})
	}
	if ran == 0 {
		t.Fatalf("%s \"Without a GPU\": no block to run without a cluster (the parser is broken?)", installPage)
	}
}

// nvidiaSMI is NVIDIA's nvidia-smi unpacked by `make nvidia-debs`, "" if absent.
func nvidiaSMI(build string) string {
	p := filepath.Join(build, "nvidia", "root", "usr", "lib", "nvidia", "current", "nvidia-smi")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// TestInstallVerifyNoCluster runs the steps of install.md "Verify" that need
// no Slurm cluster and no systemd, on the fakecuda node of "Without a GPU"
// (which says the same steps work there), in its shell environment.
// The other steps (systemctl, srun, scontrol, sbatch, sacct and a finished
// job's report) need systemd or a Slurm cluster and are only logged.
func TestInstallVerifyNoCluster(t *testing.T) {
	n := startDocNode(t)
	blocks, err := installdoc.Section(read(t, n.root, installPage), "Verify")
	if err != nil || len(blocks) == 0 {
		t.Fatalf("%s: no \"Verify\" block: %v", installPage, err)
	}
	// The "Without a GPU" shell: its first runnable block's exports.
	var exports []string
	for _, b := range n.blocks {
		if b.Info == "sh" && needsCluster(b.Commands()) == "" {
			for _, c := range b.Commands() {
				if strings.HasPrefix(c, "export ") {
					exports = append(exports, n.script(t, b, c))
				}
			}
			break
		}
	}
	if len(exports) == 0 {
		t.Fatalf("%s \"Without a GPU\": no export of fakecuda's environment", installPage)
	}
	gctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	gpus, err := n.daemon.Client().GPUs(gctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for i, line := range strings.Split(blocks[0].Body, "\n") {
		cmd, comment, _ := strings.Cut(line, " #")
		cmd, comment = strings.TrimSpace(cmd), strings.TrimSpace(comment)
		if cmd == "" || strings.HasPrefix(cmd, "#") {
			continue
		}
		at := blocks[0].Line + 1 + i
		if c := needsCluster([]string{cmd}); c != "" {
			t.Logf("%s:%d: %q not run here: needs a Slurm cluster or systemd (%s)", installPage, at, cmd, c)
			continue
		}
		f := strings.Fields(cmd)
		if f[0] != "gpuslice" {
			t.Errorf("%s:%d: %q: the test knows no check for this step (add one, or mark it as needing a cluster)", installPage, at, cmd)
			continue
		}
		ran++
		t.Run(fmt.Sprintf("line%d", at), func(t *testing.T) {
			var extraPath []string
			var check func(out string) error
			switch {
			case len(f) == 2 && f[1] == "gpus":
				// "the node's GPUs, as gpusliced sees them"
				check = func(out string) error {
					for _, g := range gpus {
						if !strings.Contains(out, g.UUID) {
							return fmt.Errorf("GPU %d (%s) is not listed", g.Index, g.UUID)
						}
					}
					return nil
				}
			case f[1] == "run" && f[len(f)-1] == "nvidia-smi":
				// "nvidia-smi reports <quota> of memory"
				smi := nvidiaSMI(n.build)
				if smi == "" {
					t.Skipf("%s:%d: %q not run: NVIDIA's nvidia-smi is not in %s/nvidia (make nvidia-debs)", installPage, at, cmd, n.build)
				}
				bin := t.TempDir()
				if err := os.Symlink(smi, filepath.Join(bin, "nvidia-smi")); err != nil {
					t.Fatal(err)
				}
				extraPath = []string{bin}
				var quota uint64
				var perr error
				for j, a := range f {
					if a == "--gpu-mem" && j+1 < len(f) {
						quota, perr = size.Parse(f[j+1])
					}
				}
				if quota == 0 || perr != nil {
					t.Fatalf("%s:%d: %q: no --gpu-mem SIZE (%v)", installPage, at, cmd, perr)
				}
				want := fmt.Sprintf("%dMiB", quota>>20)
				check = func(out string) error {
					if !regexp.MustCompile(`/\s*` + want).MatchString(out) {
						return fmt.Errorf("nvidia-smi does not report %s of memory", want)
					}
					return nil
				}
			default:
				t.Fatalf("%s:%d: %q: the test knows no check for this step", installPage, at, cmd)
			}
			script := strings.Join(append(exports, n.script(t, blocks[0], cmd)), "\n")
			out, err := n.run(t, script, n.shellEnv(extraPath...))
			if err == nil {
				err = check(out)
			}
			if err != nil {
				t.Errorf("%s:%d: %q (%s) on the fakecuda node: %v\ncommands:\n%s\noutput:\n%s",
					installPage, at, cmd, comment, err, script, out)
			}
		})
	}
	if ran == 0 {
		t.Fatalf("%s \"Verify\": no step runs without a cluster (the parser is broken?)", installPage)
	}
}
