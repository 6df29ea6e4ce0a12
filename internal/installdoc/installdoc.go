// Package installdoc reads docs/install.md as its tests follow it: the
// numbered steps of a platform's path, their inline code, and the fenced
// blocks of a section (tests/docs checks the page against the product;
// tests/packaging runs a path as written in a Debian root).
package installdoc

import (
	"fmt"
	"regexp"
	"strings"
)

// Block is a fenced code block of a Markdown page.
type Block struct {
	Info string // the fence's info string ("sh", "ini", "")
	Body string
	Line int // line number of the opening fence in the page
}

// Section returns the fenced blocks under the heading whose text is
// title, up to the next heading (a sub-section is a section of its own).
func Section(md, title string) ([]Block, error) {
	var out []Block
	level, fence := 0, false
	var cur *Block
	var body []string
	for i, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if !fence {
				fence = true
				if level > 0 {
					cur = &Block{Info: strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "`")), Line: i + 1}
					body = nil
				}
				continue
			}
			fence = false
			if cur != nil {
				cur.Body = strings.Join(body, "\n")
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		if fence {
			if cur != nil {
				body = append(body, line)
			}
			continue
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		l := len(line) - len(strings.TrimLeft(line, "#"))
		text := strings.TrimSpace(line[l:])
		switch {
		case level == 0 && text == title:
			level = l
		case level > 0:
			return out, nil
		}
	}
	if level == 0 {
		return nil, fmt.Errorf("no heading %q", title)
	}
	return out, nil
}

// Expected returns a block's documented output: its whole-line comments,
// with their line numbers in the page.
func (b Block) Expected() (lines []string, at []int) {
	for i, l := range strings.Split(b.Body, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			lines = append(lines, strings.TrimSpace(strings.TrimPrefix(t, "#")))
			at = append(at, b.Line+1+i)
		}
	}
	return lines, at
}

// Commands returns a block's command lines (not comments, not blank).
func (b Block) Commands() []string {
	var out []string
	for _, l := range strings.Split(b.Body, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, t)
		}
	}
	return out
}

// Dropin reads a systemd drop-in block: its environment and the command
// line of its last ExecStart (an empty ExecStart= resets it).
func (b Block) Dropin() (env []string, argv []string, err error) {
	for _, l := range strings.Split(b.Body, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			continue
		}
		switch k {
		case "Environment":
			for _, kv := range strings.Fields(v) {
				env = append(env, strings.Trim(kv, `"'`))
			}
		case "ExecStart":
			argv = strings.Fields(v)
		}
	}
	if len(argv) == 0 {
		return nil, nil, fmt.Errorf("line %d: the drop-in has no ExecStart", b.Line)
	}
	return env, argv, nil
}

// Step is one item of a numbered list.
type Step struct {
	N    int
	Line int
	Text string // the item, continuation lines joined
}

var reStep = regexp.MustCompile(`^(\d+)\. (.*)$`)

// NumberedSteps returns the numbered list under heading title (the
// section's text up to the next heading of any level).
func NumberedSteps(md, title string) ([]Step, error) {
	var out []Step
	in := false
	for i, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "#") {
			t := strings.TrimSpace(strings.TrimLeft(line, "#"))
			if in {
				break
			}
			in = t == title
			continue
		}
		if !in {
			continue
		}
		if m := reStep.FindStringSubmatch(line); m != nil {
			var n int
			fmt.Sscan(m[1], &n)
			out = append(out, Step{N: n, Line: i + 1, Text: m[2]})
			continue
		}
		if len(out) > 0 && strings.HasPrefix(line, "   ") && strings.TrimSpace(line) != "" {
			out[len(out)-1].Text += " " + strings.TrimSpace(line)
		} else if len(out) > 0 && strings.TrimSpace(line) != "" {
			break // the list has ended
		}
	}
	if !in && len(out) == 0 {
		return nil, fmt.Errorf("no heading %q", title)
	}
	return out, nil
}

// CodeSpans returns the inline code of a text.
func CodeSpans(s string) []string {
	parts := strings.Split(s, "`")
	var out []string
	for i := 1; i < len(parts)-1; i += 2 {
		out = append(out, parts[i])
	}
	return out
}
