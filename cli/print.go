package cli

// How the commands print sessions, GPUs and reports for people (--json
// prints the objects as gpusliced gives them).

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
)

func printSessionTable(w io.Writer, ss []client.Session) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUID\tGPUS\tQUOTA\tUSED\tPEAK\tPROCS\tEXPIRES")
	for _, s := range ss {
		var used, peak uint64
		var idx []string
		for _, g := range s.GPUs {
			used += g.UsedBytes
			peak += g.PeakBytes
			idx = append(idx, gpuRef(g.Index, g.UUID))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n", s.ID, s.UID, strings.Join(idx, ","),
			quotaText(s.GPUs), size.Format(used), size.Format(peak), len(s.Processes), s.Expires.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func printGPUTable(w io.Writer, gs []client.GPU) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tUUID\tNAME\tMEMORY\tCOMMITTED\tUSED\tSESSIONS\tCONTEXT\tENFORCED BY")
	for _, g := range gs {
		ctx := "-" // not measured (docs/daemon.md "Context cost")
		if g.ContextCostBytes != nil {
			ctx = size.Format(*g.ContextCostBytes)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", g.Index, g.UUID, g.Name, size.Format(g.PhysicalBytes),
			size.Format(g.CommittedBytes), size.Format(g.UsedBytes), g.Sessions, ctx, orDash(g.Enforcement))
	}
	return tw.Flush()
}

// orDash is s, or "-" from a gpusliced that does not say.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// quotaText is "8GiB" when every GPU has the same limit, else "8GiB+4GiB".
func quotaText(gs []client.SessionGPU) string {
	var parts []string
	same := true
	for i, g := range gs {
		parts = append(parts, size.Format(g.LimitBytes))
		if i > 0 && g.LimitBytes != gs[0].LimitBytes {
			same = false
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	if same {
		if len(parts) == 1 {
			return parts[0]
		}
		return parts[0] + " each"
	}
	return strings.Join(parts, "+")
}

func gpuRef(index int, uuid string) string {
	if index >= 0 {
		return strconv.Itoa(index)
	}
	return uuid
}

func printSession(w io.Writer, s *client.Session) {
	fmt.Fprintf(w, "Session %s (uid %d)\n  created %s, expires %s\n", s.ID, s.UID,
		s.Created.Local().Format(time.DateTime), s.Expires.Local().Format(time.DateTime))
	if s.Compute.Shared() {
		fmt.Fprintf(w, "  GPU time share on each GPU: %s\n", s.Compute)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tUUID\tQUOTA\tUSED\tPEAK\tDENIED\tENFORCED BY")
	for _, g := range s.GPUs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", gpuRef(g.Index, g.UUID), g.UUID, size.Format(g.LimitBytes),
			size.Format(g.UsedBytes), size.Format(g.PeakBytes), g.Denied, orDash(g.Enforcement))
	}
	tw.Flush()
	if len(s.Processes) == 0 {
		fmt.Fprintln(w, "\nNo attached process.")
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tSLOT\tATTACHED\tUSED")
	for _, p := range s.Processes {
		var used []string
		for _, g := range s.GPUs {
			if b := p.UsedBytes[g.UUID]; b > 0 || len(s.GPUs) == 1 {
				used = append(used, fmt.Sprintf("GPU %s: %s", gpuRef(g.Index, g.UUID), size.Format(b)))
			}
		}
		sort.Strings(used)
		if len(used) == 0 {
			used = []string{"0B"}
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", p.PID, p.Slot, p.Attached.Local().Format(time.DateTime), strings.Join(used, ", "))
	}
	tw.Flush()
}

func printReport(w io.Writer, r *client.Report) {
	reason := ""
	if r.Reason != "" {
		reason = " (" + r.Reason + ")"
	}
	fmt.Fprintf(w, "Session %s (uid %d)\n  created %s, released %s%s\n\n", r.ID, r.UID,
		r.Created.Local().Format(time.DateTime), r.Released.Local().Format(time.DateTime), reason)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UUID\tQUOTA\tPEAK\tFINAL USED\tDENIED\tRECLAIMED")
	for _, g := range r.GPUs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", g.UUID, size.Format(g.LimitBytes), size.Format(g.PeakBytes),
			size.Format(g.FinalUsedBytes), g.Denied, size.Format(g.ReclaimedBytes))
	}
	tw.Flush()
}
