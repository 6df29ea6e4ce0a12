package admincomment

import (
	"fmt"
	"strconv"
	"strings"
)

// OldEntry is one entry of the AdminComment earlier releases wrote: one
// GPU of one node, or a node's refusal.
type OldEntry struct {
	Node     string // "" in comments from before nodes were named
	UUID     string // as NVIDIA writes it (GPU-…); "" for a refusal
	Refused  bool
	QuotaMiB uint64
	PeakMiB  uint64
	Denied   uint64
}

// ParseOld reads an earlier release's comment: entries separated by ";",
// each NODE/UUID=quota_mib:Q,peak_mib:P,denied:D (UUID=… from a release
// that did not name nodes) or NODE/refused=quota_mib:Q.
func ParseOld(comment string) ([]OldEntry, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(comment), Tag)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrForeign, comment)
	}
	var out []OldEntry
	for _, e := range strings.Split(rest, ";") {
		if e == "" {
			continue
		}
		key, val, found := strings.Cut(e, "=")
		if !found {
			return nil, fmt.Errorf("%w: entry %q", ErrMalformed, e)
		}
		node, what, named := strings.Cut(key, "/")
		if !named {
			node, what = "", key
		}
		f := map[string]uint64{}
		for _, kv := range strings.Split(val, ",") {
			k, v, _ := strings.Cut(kv, ":")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: entry %q", ErrMalformed, e)
			}
			f[k] = n
		}
		o := OldEntry{Node: node, QuotaMiB: f["quota_mib"], PeakMiB: f["peak_mib"], Denied: f["denied"]}
		if what == "refused" {
			o.Refused = true
		} else {
			o.UUID = what
			if rest, isGPU := strings.CutPrefix(what, "gpu-"); isGPU {
				o.UUID = "GPU-" + rest // sacctmgr stores it lowercase
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// fromOld turns an earlier release's entries into a summary: each entry's
// node placed by its index in the job's node list (nodes).
func fromOld(comment string, nodes []string) (Summary, error) {
	entries, err := ParseOld(comment)
	if err != nil {
		return Summary{}, err
	}
	index := map[string]int{}
	for i, n := range nodes {
		index[Name(n)] = i
	}
	byNode := map[string]*Node{}
	var order []string
	for _, e := range entries {
		n := byNode[e.Node]
		if n == nil {
			i, ok := index[Name(e.Node)]
			if !ok || e.Node == "" {
				i = -1
			}
			n = &Node{Name: e.Node, Index: i, Nodes: len(nodes)}
			byNode[e.Node] = n
			order = append(order, e.Node)
		}
		n.QuotaMiB = max(n.QuotaMiB, e.QuotaMiB)
		if e.Refused {
			n.Refused = true
			continue
		}
		n.GPUs = append(n.GPUs, GPU{UUID: e.UUID, QuotaMiB: e.QuotaMiB, PeakMiB: e.PeakMiB, Denied: e.Denied})
	}
	var s Summary
	for _, name := range order {
		s.Add(*byNode[name])
	}
	return s, nil
}
