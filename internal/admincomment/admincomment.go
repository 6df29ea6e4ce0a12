// Package admincomment is gpuslice's part of a Slurm job's AdminComment:
// the job's GPU-memory figures as gpusliced records them in Slurm's
// accounting (daemon/acctrecord) and `gpuslice seff` reads them.
//
// One summary per job, whatever its node count:
//
//	gpuslice:v2;quota_mib=8192;nodes=256;reported=0-255;refused=17;peak_mib=5121;peak_on=node042/gpu-0fb77ae2-cd90-4869-996b-d2ca1bdef09b;denied=3
//
// quota_mib is the job's quota per GPU; nodes its node count; reported
// the nodes (indices in the job's node list, SLURM_JOB_NODELIST expanded)
// whose figures are in, refused those among them whose gpusliced refused
// the quota; peak_mib the highest peak of any GPU of the job (MiB, rounded
// up) and peak_on where it was; denied the allocations its quota refused,
// summed over its nodes. Each node merges its own figures in: a node
// already in reported adds nothing (its denied counted once, the peak a
// maximum), so a write repeated or reordered never counts twice. A set of
// indices is written as ranges (0-99,101-255) or, when those are longer
// than 64 characters, as a bitmap if shorter (x followed by hex digits, 4
// nodes each, the first node the highest bit): a set of 256 nodes takes
// at most 65 characters.
//
// Lowercase, without spaces or quotes: sacctmgr lowercases what it stores
// and stops a value at a quote. Per-node, per-GPU detail stays on each node
// (gpuslice report, metrics).
//
// Releases before this format wrote one entry per node and GPU
// (node01/gpu-…=quota_mib:8192,peak_mib:5121,denied:0;node02/refused=quota_mib:8192);
// ParseOld reads them.
package admincomment

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Tag starts gpuslice's part of a job's AdminComment.
const Tag = "gpuslice:"

// version marks the summary format.
const version = "v2"

// MaxNodes bounds the node count a summary may name.
const MaxNodes = 1 << 16

// ErrForeign: the AdminComment holds data that is not gpuslice's (a
// site's own); it is left alone.
var ErrForeign = errors.New("the job's AdminComment holds other data")

// ErrMalformed: the comment is gpuslice's but this release cannot read it.
var ErrMalformed = errors.New("gpuslice's AdminComment cannot be read")

// Summary is one job's figures.
type Summary struct {
	QuotaMiB uint64
	Nodes    int // the job's node count
	Reported Set // nodes whose figures (or refusal) are in
	Refused  Set // nodes whose gpusliced refused the quota
	PeakMiB  uint64
	PeakOn   string // node/gpu-uuid of the highest peak ("" when none)
	Denied   uint64
}

// GPU is one GPU's figures on a node.
type GPU struct {
	UUID     string
	QuotaMiB uint64
	PeakMiB  uint64
	Denied   uint64
}

// Node is one node's figures: what that node's gpusliced merges in.
type Node struct {
	Name     string
	Index    int // in the job's node list
	Nodes    int // the job's node count
	QuotaMiB uint64
	Refused  bool
	GPUs     []GPU
}

// MiB rounds bytes up to MiB.
func MiB(b uint64) uint64 { return (b + (1<<20 - 1)) >> 20 }

// Add merges n into s and reports whether s changed. Adding the same
// node twice changes nothing the second time; nodes added in any order
// give the same summary.
func (s *Summary) Add(n Node) bool {
	before := s.String()
	if n.Nodes > s.Nodes {
		s.Nodes = n.Nodes
	}
	s.QuotaMiB = max(s.QuotaMiB, n.QuotaMiB)
	for _, g := range n.GPUs {
		s.QuotaMiB = max(s.QuotaMiB, g.QuotaMiB)
		at := Name(n.Name) + "/" + strings.ToLower(g.UUID)
		if g.PeakMiB > s.PeakMiB || (g.PeakMiB == s.PeakMiB && g.PeakMiB > 0 && (s.PeakOn == "" || at < s.PeakOn)) {
			s.PeakMiB, s.PeakOn = g.PeakMiB, at
		}
	}
	if n.Index >= 0 && !s.Reported.Has(n.Index) { // a node not in the job's list cannot be counted once: not counted
		for _, g := range n.GPUs {
			s.Denied += g.Denied
		}
		s.Reported.Put(n.Index)
	}
	if n.Refused && n.Index >= 0 {
		s.Refused.Put(n.Index)
	}
	return s.String() != before
}

// Has reports whether n's figures are in s (adding it changes nothing).
func (s Summary) Has(n Node) bool {
	c := s.clone()
	return !c.Add(n)
}

func (s Summary) clone() Summary {
	c := s
	c.Reported = s.Reported.clone()
	c.Refused = s.Refused.clone()
	return c
}

// String is the AdminComment.
func (s Summary) String() string {
	var b strings.Builder
	b.WriteString(Tag + version)
	fmt.Fprintf(&b, ";quota_mib=%d;nodes=%d;reported=%s", s.QuotaMiB, s.Nodes, s.Reported)
	if s.Refused.Len() > 0 {
		fmt.Fprintf(&b, ";refused=%s", s.Refused)
	}
	fmt.Fprintf(&b, ";peak_mib=%d", s.PeakMiB)
	if s.PeakOn != "" {
		fmt.Fprintf(&b, ";peak_on=%s", s.PeakOn)
	}
	fmt.Fprintf(&b, ";denied=%d", s.Denied)
	return b.String()
}

// Kind of a job's AdminComment.
type Kind int

const (
	Empty   Kind = iota // nothing yet
	Current             // this format
	Old                 // an earlier release's per-node entries
)

// Parse reads a job's AdminComment as sacct prints it. An empty comment
// (or Slurm's "(null)") is Empty; a site's own data is ErrForeign; a
// gpuslice comment this release cannot read is ErrMalformed.
func Parse(comment string) (Summary, Kind, error) {
	comment = strings.TrimSpace(comment)
	if comment == "" || comment == "(null)" {
		return Summary{}, Empty, nil
	}
	rest, ok := strings.CutPrefix(comment, Tag)
	if !ok || strings.ContainsAny(comment, " \t'\"") {
		return Summary{}, Empty, fmt.Errorf("%w: %q", ErrForeign, comment)
	}
	if rest == "" {
		return Summary{}, Empty, nil
	}
	if !strings.HasPrefix(rest, version+";") && rest != version {
		if _, err := ParseOld(comment); err != nil {
			return Summary{}, Empty, err
		}
		return Summary{}, Old, nil
	}
	s, err := parseSummary(rest)
	if err != nil {
		return Summary{}, Empty, fmt.Errorf("%w: %q: %v", ErrMalformed, comment, err)
	}
	return s, Current, nil
}

func parseSummary(rest string) (Summary, error) {
	var s Summary
	seen := map[string]bool{}
	for _, f := range strings.Split(rest, ";")[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || seen[k] {
			return s, fmt.Errorf("field %q", f)
		}
		seen[k] = true
		var err error
		switch k {
		case "quota_mib":
			s.QuotaMiB, err = strconv.ParseUint(v, 10, 64)
		case "nodes":
			s.Nodes, err = strconv.Atoi(v)
			if err == nil && (s.Nodes < 0 || s.Nodes > MaxNodes) {
				err = fmt.Errorf("%d nodes", s.Nodes)
			}
		case "reported":
			s.Reported, err = ParseSet(v)
		case "refused":
			s.Refused, err = ParseSet(v)
		case "peak_mib":
			s.PeakMiB, err = strconv.ParseUint(v, 10, 64)
		case "peak_on":
			if v == "" || strings.ContainsAny(v, ";=") {
				err = errors.New("empty")
			}
			s.PeakOn = v
		case "denied":
			s.Denied, err = strconv.ParseUint(v, 10, 64)
		default:
			err = errors.New("unknown field")
		}
		if err != nil {
			return s, fmt.Errorf("%s: %v", k, err)
		}
	}
	for _, k := range []string{"quota_mib", "nodes", "reported", "peak_mib", "denied"} {
		if !seen[k] {
			return s, fmt.Errorf("no %s", k)
		}
	}
	return s, nil
}

// Merge returns the comment with n's figures merged in (existing is the
// job's AdminComment as sacct prints it). nodes, the job's node list, is
// used to carry over an earlier release's per-node entries (a job ended
// on nodes of both releases during an upgrade). ErrForeign or
// ErrMalformed: the comment must be left alone.
func Merge(existing string, n Node, nodes []string) (string, error) {
	s, kind, err := Parse(existing)
	if err != nil {
		return "", err
	}
	if kind == Old {
		if s, err = fromOld(existing, nodes); err != nil {
			return "", err
		}
	}
	s.Add(n)
	return s.String(), nil
}

// Contains reports whether the comment holds n's figures: nothing to
// write.
func Contains(comment string, n Node) bool {
	s, kind, err := Parse(comment)
	return err == nil && kind == Current && s.Has(n)
}

// Name is a node name as it stands in the comment: lowercase (as
// sacctmgr stores it), and nothing that would end a value or a field.
func Name(node string) string {
	b := []byte(strings.ToLower(node))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
