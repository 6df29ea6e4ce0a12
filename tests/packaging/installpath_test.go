package packaging

// docs/install.md's platform paths as a Debian root runs them
// (installroots_test.go): every command of every numbered step runs as
// the page gives it, with its placeholders filled, then every line of
// Verify, then Remove's purge. What the page takes as given (the GPUs, a
// running cluster, systemd) is the node of testdata/install-node.sh. A
// step the test cannot run as written fails the test, unless this file
// says which and why (skipSpans, skipVerify, rpmAlternative).

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/installdoc"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

const installPage = "docs/install.md"

// programs are the first words of inline code that is a command to run
// (a variable assignment may come first); any other inline code is a name
// the step speaks of (a file, a line of slurm.conf, what a command prints).
var programs = map[string]bool{"apt": true, "apt-get": true, "dpkg": true, "dnf": true, "rpm": true,
	"gpuslice": true, "ln": true, "systemctl": true, "make": true, "mkdir": true, "mknod": true}

// rpmAlternative: the command is dnf's or rpm's.
func rpmAlternative(span string) bool {
	f := strings.Fields(span)
	return len(f) > 0 && (f[0] == "dnf" || f[0] == "rpm")
}

func isCommand(span string) bool {
	for _, w := range strings.Fields(span) {
		if strings.Contains(w, "=") && !strings.HasPrefix(w, "-") {
			continue // VAR=value before the program
		}
		return programs[w]
	}
	return false
}

// proseSteps are instructions the page gives in words: each is run by its
// shell, and the inline code inside the words it matches is not run again.
var proseSteps = []struct {
	re *regexp.Regexp
	sh string
}{
	{regexp.MustCompile("add the `Gres=` that `gpuslice slurm-config --print node` prints to the node's `NodeName` line in `slurm\\.conf`"),
		`gres=$(gpuslice slurm-config --print node | grep -o 'Gres=[^ ]*') && echo "$gres" && ` +
			`sed -i "s|^NodeName=$NODE .*|& $gres|" "$SLURM_CONF_FILE" && grep "^NodeName=$NODE " "$SLURM_CONF_FILE"`},
	{regexp.MustCompile("In `slurm\\.conf`, the same on every host, the lines of `(/usr/share/doc/gpuslice/slurm\\.conf\\.fragment)`"),
		`grep -Ev '^[[:space:]]*(#|$)' /usr/share/doc/gpuslice/slurm.conf.fragment | tee -a "$SLURM_CONF_FILE"`},
	{regexp.MustCompile("Restart `slurmctld` and `slurmd`\\."), `systemctl restart slurmctld && systemctl restart slurmd`},
	{regexp.MustCompile(`\[Verify\]\(#verify\)`), `verify`},
}

// skipSpans are commands of a step this node does not run, with why; a
// command of dnf or rpm is the RPM family's alternative, which a Debian
// root does not run (rpmAlternative).
var skipSpans = map[string]string{
	"make packages PKG_FORMATS=deb":     "the test built the packages it installs (make packages)",
	"systemctl disable --now gpusliced": "for a submit host without GPUs; this node has GPUs",
}

// skipVerify are lines of Verify this node does not run, with why.
var skipVerify = map[string]string{
	"sacct": "this one-node cluster has no slurmdbd (the Slurm suites check the figures in sacct on every release: TestSacctShowsPeak)",
}

// pathScript writes a platform path's steps, then Verify's lines, as bash
// that testdata/install-node.sh runs: each step starts with a "step=N"
// line, each command is echoed ("+ ...") before it runs, and the first
// that fails ends the run. vars fill the page's placeholders.
func pathScript(page, title string, vars map[string]string) (string, error) {
	steps, err := installdoc.NumberedSteps(page, title)
	if err != nil {
		return "", err
	}
	fill := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "echo step=%d\n", s.N)
		// The step's actions in the page's order: the prose it matches
		// (blanked out, so its inline code is not run again) and its
		// commands.
		type action struct {
			at int
			sh string // "" for a command of the page
			c  string
		}
		var acts []action
		text := s.Text
		for _, p := range proseSteps {
			if loc := p.re.FindStringIndex(text); loc != nil {
				acts = append(acts, action{at: loc[0], sh: p.sh})
				text = text[:loc[0]] + strings.Repeat(" ", loc[1]-loc[0]) + text[loc[1]:]
			}
		}
		for at := 0; ; {
			open := strings.Index(text[at:], "`")
			if open < 0 {
				break
			}
			end := strings.Index(text[at+open+1:], "`")
			if end < 0 {
				break
			}
			acts = append(acts, action{at: at + open, c: text[at+open+1 : at+open+1+end]})
			at += open + end + 2
		}
		sort.SliceStable(acts, func(i, j int) bool { return acts[i].at < acts[j].at })
		ran := 0
		for _, a := range acts {
			switch {
			case a.sh == "verify":
				v, err := verifyScript(page, vars)
				if err != nil {
					return "", err
				}
				b.WriteString(v)
				ran++
			case a.sh != "":
				fmt.Fprintf(&b, "run %s\n", shq(a.sh))
				ran++
			case !isCommand(a.c):
			case skipSpans[a.c] != "":
				fmt.Fprintf(&b, "echo %s\n", shq("not run: `"+a.c+"`: "+skipSpans[a.c]))
				ran++
			case rpmAlternative(a.c):
				fmt.Fprintf(&b, "echo %s\n", shq("not run: `"+a.c+"`: the RPM family's; this root is Debian's"))
			case strings.Contains(fill(a.c), "<"):
				return "", fmt.Errorf("%s:%d: `%s`: a placeholder the test cannot fill", installPage, s.Line, a.c)
			default:
				fmt.Fprintf(&b, "run %s\n", shq(fill(a.c)))
				ran++
			}
		}
		if ran == 0 {
			return "", fmt.Errorf("%s:%d: step %d runs nothing the test knows how to run as written: %q", installPage, s.Line, s.N, s.Text)
		}
		b.WriteString("boot_sync\n")
	}
	return b.String(), nil
}

// verifyScript is Verify's block, line by line; a line naming <jobid>
// runs once the job sbatch submitted in an earlier line has ended.
func verifyScript(page string, vars map[string]string) (string, error) {
	blocks, err := installdoc.Section(page, "Verify")
	if err != nil || len(blocks) == 0 {
		return "", fmt.Errorf("%s: Verify has no block (%v)", installPage, err)
	}
	var b strings.Builder
	b.WriteString("echo step=verify\n")
	for _, l := range blocks[0].Commands() {
		cmd, _, _ := strings.Cut(l, "  #") // the page's aligned comments
		cmd = strings.TrimSpace(cmd)
		if why, ok := skipVerify[strings.Fields(cmd)[0]]; ok {
			fmt.Fprintf(&b, "echo %s\n", shq("not run: `"+cmd+"`: "+why))
			continue
		}
		if strings.Contains(cmd, "<jobid>") {
			b.WriteString("wait_job_end \"$jobid\"\n")
			cmd = strings.ReplaceAll(cmd, "<jobid>", "$jobid")
		}
		for k, v := range vars {
			cmd = strings.ReplaceAll(cmd, k, v)
		}
		fmt.Fprintf(&b, "run %s\n", shq(cmd))
		if strings.HasPrefix(cmd, "sbatch ") {
			b.WriteString(`jobid=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' /tmp/run.out | tail -1)` + "\n")
		}
	}
	return b.String(), nil
}

// shq quotes s for bash.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// sectionText is a section's prose (up to the next heading), its lines
// joined with blanks.
func sectionText(page, title string) string {
	var out []string
	in := false
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "#") {
			if in {
				break
			}
			in = strings.TrimSpace(strings.TrimLeft(l, "#")) == title
			continue
		}
		if in {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, " ")
}

// nodeScript is the whole run in a root: the node, "Without a GPU"'s
// drop-in and environment (this node has no GPU), the platform path of
// title with Verify, a job of "Without a GPU" as a user, a bad --gpu-mem,
// and Remove's purge.
func nodeScript(page, title, version string) (string, error) {
	blocks, err := installdoc.Section(page, "Without a GPU")
	if err != nil {
		return "", err
	}
	var dropin, export, job string
	for _, b := range blocks {
		cmds := b.Commands()
		switch {
		case b.Info == "ini":
			dropin = b.Body
		case len(cmds) == 2 && strings.HasPrefix(cmds[0], "export ") && strings.Contains(cmds[0], "FAKECUDA_STATE=") &&
			strings.HasPrefix(cmds[1], "srun --gpu-mem="):
			export, job = cmds[0], cmds[1]
		}
	}
	if dropin == "" || export == "" {
		return "", fmt.Errorf("%s: \"Without a GPU\" lacks its drop-in (ini) or its export and srun block", installPage)
	}
	var purge string
	for _, c := range installdoc.CodeSpans(sectionText(page, "Remove")) {
		if strings.HasPrefix(c, "apt purge ") {
			purge = c
		}
	}
	if purge == "" {
		return "", fmt.Errorf("%s: Remove gives no `apt purge`", installPage)
	}
	path, err := pathScript(page, title, map[string]string{"<version>": version})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#!/bin/bash\n. /mnt/gpuslice-test/install-node.sh\nnode_prepare\n")
	b.WriteString("echo step=without-a-gpu\nmkdir -p /etc/systemd/system/gpusliced.service.d\n")
	fmt.Fprintf(&b, "printf '%%s\\n' %s >/etc/systemd/system/gpusliced.service.d/override.conf\n", shq(dropin))
	b.WriteString(export + "\ncp /mnt/gpuslice-dist/*.deb /root/ && cd /root\n")
	b.WriteString(path)
	b.WriteString("echo \"installed=$(dpkg-query -W -f '${Version}' gpuslice)\"\n")
	b.WriteString("echo \"plugin=$(readlink \"$PLUGIN_DIR/gpuslice.so\")\"\n")
	b.WriteString("echo step=job\ncd /tmp\nid gsltest1 >/dev/null 2>&1 || useradd --system --no-create-home --user-group gsltest1\n")
	fmt.Fprintf(&b, "run %s\n", shq("setpriv --reuid=gsltest1 --regid=gsltest1 --init-groups "+job))
	b.WriteString(`srun --gpu-mem=8X true 2>/tmp/bad.err && fail "srun --gpu-mem=8X was accepted"` + "\n")
	b.WriteString(`echo "bad_gpu_mem=$(grep -o "invalid --gpu-mem '8X'" /tmp/bad.err)"` + "\n")
	b.WriteString("echo step=remove\nscancel --full --quiet --partition=test || true\nsystemctl stop gpusliced\n")
	fmt.Fprintf(&b, "run %s\n", shq(purge+" gpuslice-fakecuda"))
	b.WriteString(`[ ! -e "$PLUGIN_DIR/gpuslice.so" ] || fail "plugin left after purge"` + "\n")
	b.WriteString(`[ ! -e "$(dirname "$SLURM_CONF_FILE")/plugstack.conf.d/gpuslice.conf" ] || fail "plugstack snippet left after purge"` + "\n")
	b.WriteString("echo purged=yes\n")
	return b.String(), nil
}

// The paths as the roots run them, written from the page alone (no root,
// no packages): every step runs something, every placeholder is filled.
func TestPathScripts(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), installPage))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		title string
		want  []string
	}{
		{"Debian and Ubuntu", []string{"run 'apt install ./gpuslice_1.2.3-1_amd64.deb'", "run 'systemctl restart slurmctld'",
			"run 'ln -s /usr/share/gpuslice/job_submit.lua /etc/slurm/job_submit.lua'", "echo step=verify"}},
		{"Slurm built from source", []string{"run 'apt install ./gpuslice_1.2.3-1_amd64.deb'",
			"not run: `dnf install ./gpuslice-<version>-1.x86_64.rpm`", "run 'SLURM_CONF=/usr/local/etc/slurm.conf gpuslice slurm-plugin'",
			"run 'systemctl restart slurmctld && systemctl restart slurmd'", "echo step=verify"}},
	} {
		script, err := nodeScript(string(page), c.title, "1.2.3")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range c.want {
			if !strings.Contains(script, want) {
				t.Errorf("%s: the script lacks %q:\n%s", c.title, want, script)
			}
		}
		if testing.Verbose() {
			t.Logf("%s:\n%s", c.title, script)
		}
	}
}
