package docs

// Every message a user or an admin can meet is explained on
// docs/troubleshooting.md. "A message" is precisely what the rules below
// find in the source: the text at a call site that prints a line for a
// person (a log call, an error handed to one, a line written to a job's
// output), one rule per kind of call site. Each message is reduced to its
// fixed text (string literals joined, format verbs and concatenated values
// cut out); it is "on the page" when one code span or code line of the page
// holds every piece of that text of three letters or more, in order (the
// page writes a variable part as "…").
//
// The rules are part of the contract: a rule that finds nothing means the
// code moved and the rule must follow it, so that fails too.

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

const troublePage = "docs/troubleshooting.md"

// msgRule finds messages in some files.
type msgRule struct {
	what  string   // who prints it, for the failure message
	globs []string // files, relative to the repository root (tests excluded)
	// calls: each match ends where the message's first string literal
	// starts (the format of a log call, an error's text).
	calls []string
	// prefixed: also every string literal whose text starts with
	// "gpuslice: " (the product's own lines name it first).
	prefixed bool
	lang     string // "c", "go", "lua", "sh": how literals join
}

var msgRules = []msgRule{
	{what: "job_submit.lua (submit-time refusals, slurmctld's log)", globs: []string{"etc/slurm/job_submit.lua"},
		calls: []string{`return nil,\s*`}, prefixed: true, lang: "lua"},
	{what: "SPANK plugin (error, info and user-level lines; plugstack.conf and option errors)",
		globs: []string{"spank/*.c"},
		calls: []string{`gs_error\(\s*`, `gs_info\(\s*`, `gs_user\(\s*`, `snprintf\(err,\s*errlen,\s*`,
			`snprintf\(line,\s*sizeof\(line\),\s*`},
		prefixed: true, lang: "c"},
	{what: "interceptor (lines on the job's stderr)", globs: []string{"native/interceptor/*.c"},
		calls: []string{`gs_log\(\s*`, `put\(l,\s*`}, lang: "c"},
	{what: "Prolog and Epilog (slurmd's log)", globs: []string{"prolog/main.go"},
		calls: []string{`Fprintf\(logw,\s*`, `Fprintln\(logw,\s*`}, lang: "go"},
	{what: "Prolog and Epilog errors (slurmd's log; the refusal the job prints)",
		globs: []string{"prolog/refusal.go", "prolog/run.go", "prolog/job.go"},
		calls: []string{`fmt\.Errorf\(\s*`, `fmt\.Sprintf\(\s*`}, lang: "go"},
	{what: "gpusliced start-up", globs: []string{"daemon/daemon.go"},
		calls: []string{`fmt\.Errorf\(\s*`, `errors\.New\(\s*`}, lang: "go"},
	{what: "gpusliced start-up: the session database", globs: []string{"daemon/store/store.go"},
		calls: []string{`fmt\.Errorf\(\s*`, `errors\.New\(\s*`}, lang: "go"},
	{what: "gpusliced admission (the node's refusal)", globs: []string{"daemon/session/admission.go"},
		calls: []string{`fmt\.Errorf\(\s*`, `fmt\.Sprintf\(\s*`}, lang: "go"},
	{what: "gpusliced audit (its log)", globs: []string{"daemon/audit/*.go"},
		calls: []string{`\.(?:Warn|Error|Info)\(\s*`}, lang: "go"},
	{what: "gpuslice slurm-plugin (package install, upgrade)", globs: []string{"cli/slurmplugin.go"},
		calls: []string{`s\.off\(c,\s*dirs,\s*(?:fmt\.Sprintf\(\s*)?`}, prefixed: true, lang: "go"},
	{what: "package scripts and the enroot hook", globs: []string{"packaging/scripts/*/*", "etc/enroot/*.sh"},
		prefixed: true, lang: "sh"},
}

// message is one message found in the source.
type message struct {
	file   string
	line   int
	pieces []string // fixed text, in order
	text   string   // as the page would write it, variable parts as "…"
}

// reVerb is a printf format verb (C, Go, Lua's string.format).
var reVerb = regexp.MustCompile(`%[-+# 0-9.*]*(?:ll|l|z|h)?[a-zA-Z]`)

// readLiteral reads the string literal starting at src[i] (a quote);
// it returns the decoded text and the index after it.
func readLiteral(src string, i int) (string, int) {
	q := src[i]
	var b strings.Builder
	for j := i + 1; j < len(src); j++ {
		c := src[j]
		switch {
		case c == '\\' && q != '`' && j+1 < len(src):
			j++
			switch src[j] {
			case 'n', 't':
				b.WriteByte(' ')
			default:
				b.WriteByte(src[j])
			}
		case c == q:
			return b.String(), j + 1
		case c == '\n' && q != '`':
			return b.String(), j
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), len(src)
}

// skipOperand skips one operand of a concatenation (a name, a call, an
// index): identifier characters, dots, colons and balanced brackets.
func skipOperand(src string, i int) int {
	depth := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			if depth == 0 {
				return i
			}
			depth--
		case c == '"' || c == '\'' || c == '`':
			if depth == 0 {
				return i
			}
			_, i = readLiteral(src, i)
			continue
		case depth == 0 && !(c == '_' || c == '.' || c == ':' || c == '#' ||
			c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'):
			return i
		}
		i++
	}
	return i
}

func skipSpace(src string, i int) int {
	for i < len(src) && strings.ContainsRune(" \t\r\n", rune(src[i])) {
		i++
	}
	return i
}

// readMessage reads the message expression starting with the literal at
// src[i]: C's adjacent literals, Go's +, Lua's .. join pieces; a joined
// value is a variable part ("\x00").
func readMessage(src string, i int, lang string) string {
	var b strings.Builder
	for {
		text, j := readLiteral(src, i)
		if lang == "sh" {
			text = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\(.*?\)`).ReplaceAllString(text, "\x00")
		}
		b.WriteString(text)
		k := skipSpace(src, j)
		// Operators joining another piece.
		for {
			var op string
			switch {
			case lang == "lua" && strings.HasPrefix(src[k:], ".."):
				op = ".."
			case lang == "go" && strings.HasPrefix(src[k:], "+") && !strings.HasPrefix(src[k:], "+="):
				op = "+"
			}
			if op == "" {
				break
			}
			k = skipSpace(src, k+len(op))
			if k < len(src) && (src[k] == '"' || src[k] == '`') {
				break
			}
			b.WriteByte(0)
			k = skipSpace(src, skipOperand(src, k))
		}
		if k < len(src) && src[k] == '"' && (lang == "c" || lang == "lua" || lang == "go") {
			// C: adjacent literals; Lua and Go: the piece after an operator.
			i = k
			continue
		}
		return b.String()
	}
}

// fixedPieces cuts a message at its format verbs and joined values and
// keeps the pieces with three letters or more.
func fixedPieces(msg string) []string {
	msg = reVerb.ReplaceAllString(strings.ReplaceAll(msg, "%%", "%"), "\x00")
	var out []string
	for _, p := range strings.Split(msg, "\x00") {
		p = squash(p)
		letters := 0
		for _, r := range p {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
				letters++
			}
		}
		if letters >= 3 {
			out = append(out, p)
		}
	}
	return out
}

// lineOf is the 1-based line of offset i.
func lineOf(src string, i int) int { return strings.Count(src[:i], "\n") + 1 }

// findMessages applies the rules to the repository at root.
func findMessages(t *testing.T, root string) ([]message, map[string]int) {
	t.Helper()
	var out []message
	perRule := map[string]int{}
	rePrefixed := regexp.MustCompile(`["']gpuslice: `)
	for _, r := range msgRules {
		var calls []*regexp.Regexp
		for _, c := range r.calls {
			calls = append(calls, regexp.MustCompile(c))
		}
		var files []string
		for _, g := range r.globs {
			m, err := filepath.Glob(filepath.Join(root, g))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, m...)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			rel, _ := filepath.Rel(root, f)
			src := read(t, root, rel)
			seen := map[int]bool{}
			var starts []int
			for _, re := range calls {
				for _, ix := range re.FindAllStringIndex(src, -1) {
					if e := ix[1]; e < len(src) && (src[e] == '"' || src[e] == '`') {
						starts = append(starts, e)
					}
				}
			}
			if r.prefixed {
				for _, ix := range rePrefixed.FindAllStringIndex(src, -1) {
					starts = append(starts, ix[0])
				}
			}
			for _, s := range starts {
				if seen[s] || inComment(src, s) {
					continue
				}
				seen[s] = true
				text := readMessage(src, s, r.lang)
				pieces := fixedPieces(text)
				if len(pieces) == 0 {
					continue // "%s": a message made elsewhere
				}
				out = append(out, message{file: filepath.ToSlash(rel), line: lineOf(src, s), pieces: pieces,
					text: strings.ReplaceAll(reVerb.ReplaceAllString(strings.ReplaceAll(text, "%%", "%"), "…"), "\x00", "…")})
				perRule[r.what]++
			}
		}
		if perRule[r.what] == 0 {
			t.Errorf("rule %q finds no message in %v: the code moved; make the rule follow it", r.what, r.globs)
		}
	}
	return out, perRule
}

// inComment reports whether offset i is inside a line comment (//, --, #)
// or a C block comment.
func inComment(src string, i int) bool {
	start := strings.LastIndexByte(src[:i], '\n') + 1
	before := src[start:i]
	t := strings.TrimSpace(before)
	if strings.HasPrefix(t, "//") || strings.HasPrefix(t, "--") || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "*") {
		return true
	}
	open := strings.LastIndex(src[:i], "/*")
	return open >= 0 && !strings.Contains(src[open:i], "*/")
}

// codeLines are the page's code spans and the lines of its code blocks,
// whitespace squashed.
func codeLines(md string) []string {
	var out []string
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			out = append(out, squash(line))
			continue
		}
		parts := strings.Split(line, "`")
		for i := 1; i < len(parts)-1; i += 2 {
			out = append(out, squash(parts[i]))
		}
	}
	return out
}

// onPage reports whether one of the page's code lines holds every piece
// of m, in order.
func onPage(m message, lines []string) bool {
	for _, l := range lines {
		at := 0
		ok := true
		for _, p := range m.pieces {
			k := strings.Index(l[at:], p)
			if k < 0 {
				ok = false
				break
			}
			at += k + len(p)
		}
		if ok {
			return true
		}
	}
	return false
}

// missing returns the messages the page does not show.
func missing(msgs []message, page string) []message {
	lines := codeLines(page)
	var out []message
	for _, m := range msgs {
		if !onPage(m, lines) {
			out = append(out, m)
		}
	}
	return out
}

// minMessages is fewer than the rules find today: far fewer means a rule
// broke, not that the code lost its messages.
const minMessages = 100

func TestEveryMessageExplained(t *testing.T) {
	root := testenv.RepoRoot(t)
	msgs, perRule := findMessages(t, root)
	if len(msgs) < minMessages {
		t.Fatalf("only %d messages found (%v): a rule is broken", len(msgs), perRule)
	}
	t.Logf("%d messages: %v", len(msgs), perRule)
	for _, m := range missing(msgs, read(t, root, troublePage)) {
		t.Errorf("%s:%d: message not on %s: `%s`", m.file, m.line, troublePage, m.text)
	}
}

// TestMessageCheckBites: with any one message's lines taken off the page,
// the check reports that message.
func TestMessageCheckBites(t *testing.T) {
	root := testenv.RepoRoot(t)
	msgs, _ := findMessages(t, root)
	page := read(t, root, troublePage)
	if len(missing(msgs, page)) > 0 {
		t.Skip("the page misses messages already (TestEveryMessageExplained says which)")
	}
	for _, m := range msgs {
		var kept []string
		for _, l := range strings.Split(page, "\n") {
			if !onPage(m, append(codeLines(l), squash(l))) {
				kept = append(kept, l)
			}
		}
		if got := missing([]message{m}, strings.Join(kept, "\n")); len(got) != 1 {
			t.Errorf("%s:%d: with its lines taken off the page the check still finds `%s`", m.file, m.line, m.text)
		}
	}
}
