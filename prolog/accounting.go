package prolog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/spf13/pflag"
)

// The Epilog records each job's GPU-memory figures in Slurm's accounting,
// in the job's AdminComment: only an administrator can set it (the Epilog
// runs as root; a job's user cannot), slurmdbd stores it with the job and
// `sacct -o JobID,AdminComment` shows it. The figures are gpusliced's
// release report, never anything the job wrote.
//
// Slurm 22.05 refuses `scontrol update AdminComment=` once the job has
// finished, which it has when the node's Epilog runs ("Job has already
// finished"); so the Epilog writes to slurmdbd with
// `sacctmgr modify job where jobid=N set AdminComment=...`, which needs the
// node to reach slurmdbd (AccountingStorageHost), as sacct does.
//
// A cluster without accounting storage (AccountingStorageType other than
// accounting_storage/slurmdbd) makes sacct and sacctmgr say so at once,
// without asking anyone: the Epilog then records nothing and returns. With
// accounting, the whole step is bounded by Wait (default 5 s: slurmdbd
// normally holds the job's record from its start; the Epilog waits a
// little for one that is late, never longer), each call by Timeout.

// CommentTag starts gpuslice's part of a job's AdminComment.
const CommentTag = "gpuslice:"

// Accounting configures how the Epilog records a job's figures.
type Accounting struct {
	// Sacctmgr and Sacct are Slurm's programs; Sacctmgr "" turns
	// recording off.
	Sacctmgr, Sacct string
	// Timeout bounds each call; Wait bounds how long the Epilog waits for
	// slurmdbd to hold the job's record.
	Timeout, Wait time.Duration
	// run executes a command and returns its combined output (tests).
	run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

// AccountingFlags registers the Epilog's accounting flags on fs.
func AccountingFlags(fs *pflag.FlagSet) *Accounting {
	a := &Accounting{Timeout: 3 * time.Second, Wait: 5 * time.Second}
	fs.StringVar(&a.Sacctmgr, "sacctmgr", "/usr/bin/sacctmgr",
		"sacctmgr used to record the job's quota and peak GPU memory in its AdminComment in Slurm's accounting (empty: do not record)")
	fs.StringVar(&a.Sacct, "sacct", "/usr/bin/sacct", "sacct used to read the job's AdminComment before adding to it")
	fs.DurationVar(&a.Wait, "accounting-wait", a.Wait,
		"the longest the Epilog spends recording the job's figures in Slurm's accounting (waiting for slurmdbd to hold the job)")
	return a
}

// NodeEntries renders a node's release report as its part of gpuslice's
// AdminComment: one entry per GPU, its node and UUID, quota and peak in
// MiB (the peak rounded up) and the allocations denied, e.g.
//
//	node01/gpu-0fb77ae2-cd90-4869-996b-d2ca1bdef09b=quota_mib:8192,peak_mib:5121,denied:0
//
// All lowercase, without quotes or spaces: sacctmgr lowercases what it
// stores and stops a value at a quote.
func NodeEntries(node string, r *client.Report) []string {
	node = commentNode(node)
	out := make([]string, 0, len(r.GPUs))
	for _, g := range r.GPUs {
		out = append(out, fmt.Sprintf("%s/%s=quota_mib:%d,peak_mib:%d,denied:%d", node,
			strings.ToLower(g.UUID), g.LimitBytes>>20, (g.PeakBytes+(1<<20)-1)>>20, g.Denied))
	}
	return out
}

// RefusalEntry is the entry of a node whose gpusliced refused the job's
// quota (quotaBytes per GPU, rounded up to the MiB), e.g.
//
//	node01/refused=quota_mib:4096
func RefusalEntry(node string, quotaBytes uint64) string {
	return fmt.Sprintf("%s/refused=quota_mib:%d", commentNode(node), (quotaBytes+(1<<20)-1)>>20)
}

// FormatComment joins entries into gpuslice's AdminComment: CommentTag,
// then the entries separated by ";".
func FormatComment(entries []string) string {
	return CommentTag + strings.Join(entries, ";")
}

// commentNode is a node name as it stands in the comment: lowercase (as
// sacctmgr stores it), and nothing that would end a value or an entry.
func commentNode(node string) string {
	b := []byte(strings.ToLower(node))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// commentEntries splits gpuslice's AdminComment into its entries and the
// node of each ("" for an entry without one, from a gpuslice that did
// not name nodes).
func commentEntries(comment string) (entries, nodes []string) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(comment), CommentTag)
	if !ok || rest == "" {
		return nil, nil
	}
	for _, e := range strings.Split(rest, ";") {
		if e == "" {
			continue
		}
		key, _, _ := strings.Cut(e, "=")
		node, _, named := strings.Cut(key, "/")
		if !named {
			node = ""
		}
		entries, nodes = append(entries, e), append(nodes, node)
	}
	return entries, nodes
}

// MergeComment returns comment (gpuslice's AdminComment of the job, or
// empty) with node's entries replaced by mine. The other nodes' entries
// stay, those of nodes outside the job (nodes, when known: an earlier run
// of the job id) and those that name no node excepted.
func MergeComment(comment, node string, mine, nodes []string) string {
	node = commentNode(node)
	inJob := map[string]bool{}
	for _, n := range nodes {
		inJob[commentNode(n)] = true
	}
	var out []string
	entries, owners := commentEntries(comment)
	for i, e := range entries {
		if o := owners[i]; o != "" && o != node && (len(nodes) == 0 || inJob[o]) {
			out = append(out, e)
		}
	}
	return FormatComment(append(out, mine...))
}

// commentHas reports whether comment holds every entry of want.
func commentHas(comment string, want []string) bool {
	entries, _ := commentEntries(comment)
	have := map[string]bool{}
	for _, e := range entries {
		have[e] = true
	}
	for _, w := range want {
		if !have[w] {
			return false
		}
	}
	return true
}

// ours reports whether an AdminComment is empty or only gpuslice's (from
// this job's other nodes, or an earlier run of the same job id): anything
// else is the site's, which sacctmgr would lowercase, so it is left alone.
func ours(existing string) bool {
	existing = strings.TrimSpace(existing)
	return existing == "" || existing == "(null)" ||
		(strings.HasPrefix(existing, CommentTag) && !strings.ContainsAny(existing, " '\""))
}

func (a *Accounting) exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	if a.run != nil {
		return a.run(ctx, name, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = os.Environ() // slurmd's: SLURM_CONF when it set one
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// errNotYet: slurmdbd has no record of the job yet.
var errNotYet = errors.New("slurmdbd has no record of the job yet")

// errNoAccounting: Slurm has no accounting storage (no slurmdbd).
var errNoAccounting = errors.New("Slurm has no accounting storage (AccountingStorageType is not accounting_storage/slurmdbd)")

// noAccounting reports whether sacct's or sacctmgr's output says the
// cluster has no accounting storage: what Slurm 22.05-24.11 print then,
// from slurm.conf alone, without a connection.
func noAccounting(out []byte) bool {
	return bytes.Contains(out, []byte("accounting storage is disabled")) ||
		bytes.Contains(out, []byte("not running a supported accounting_storage plugin"))
}

// errSiteComment: the job's AdminComment holds someone else's data.
var errSiteComment = errors.New("the job's AdminComment holds other data; left alone")

// Record stores this node's part of the job's figures in its
// AdminComment: r, gpusliced's release report, or, when gpusliced refused
// the job's quota here (refused), that refusal. Failing to record is
// logged, never an error: a failing Epilog would drain the node.
//
// Each node of a job writes the whole comment (sacctmgr sets a field; it
// cannot add to one), its entries merged into what the other nodes
// wrote. So that two nodes do not write at once, each reading the comment
// before the other has written, a node first waits (for half of Wait at
// most) for the entries of the nodes before it in the job's node list;
// and after writing it reads the comment back, writing again if its
// entries were lost.
func (a *Accounting) Record(ctx context.Context, cfg Config, job Job, r *client.Report, refused bool) {
	if a == nil || a.Sacctmgr == "" {
		return
	}
	var mine []string
	switch {
	case r != nil && len(r.GPUs) > 0:
		mine = NodeEntries(job.Node, r)
	case refused:
		mine = []string{RefusalEntry(job.Node, job.QuotaBytes)}
	default:
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a.Wait)
	defer cancel()
	w := writer{a: a, job: job, mine: mine, before: nodesBefore(job), until: time.Now().Add(a.Wait / 2)}
	wait := 250 * time.Millisecond
	var err error
	for {
		if err = w.record(ctx); err == nil {
			cfg.logf(job, "recorded in Slurm's accounting (AdminComment): %s", strings.Join(mine, ";"))
			return
		}
		if errors.Is(err, errNoAccounting) {
			cfg.logf(job, "no accounting storage: figures not recorded in Slurm's accounting (%v)", err)
			return
		}
		if errors.Is(err, errSiteComment) || ctx.Err() != nil {
			break
		}
		pause := wait
		if errors.Is(err, errEarlierNodes) {
			pause = 100 * time.Millisecond
		} else {
			wait = min(2*wait, 2*time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	cfg.logf(job, "could not record the GPU memory figures in Slurm's accounting (%s): %v", strings.Join(mine, ";"), err)
}

// nodesBefore are the job's nodes before this one in Slurm's order.
func nodesBefore(job Job) []string {
	me := commentNode(job.Node)
	for i, n := range job.Nodes {
		if commentNode(n) == me {
			return job.Nodes[:i]
		}
	}
	return nil
}

// errEarlierNodes: nodes before this one have not written their entries.
var errEarlierNodes = errors.New("waiting for the entries of the job's nodes before this one")

// errLost: another node's write replaced this node's entries.
var errLost = errors.New("this node's entries were overwritten by another node's")

// writer is one node's attempt at the job's comment.
type writer struct {
	a      *Accounting
	job    Job
	mine   []string
	before []string
	until  time.Time // when to stop waiting for the nodes before
}

func (w *writer) record(ctx context.Context) error {
	a, job := w.a, w.job
	if a.Sacct == "" { // nothing to merge with: this node's entries only
		return a.set(ctx, job.ID, FormatComment(w.mine))
	}
	existing, name, err := a.comment(ctx, job)
	if err != nil {
		return err
	}
	if time.Now().Before(w.until) {
		_, owners := commentEntries(existing)
		have := map[string]bool{}
		for _, o := range owners {
			have[o] = true
		}
		for _, n := range w.before {
			if !have[commentNode(n)] {
				return fmt.Errorf("%w (%s)", errEarlierNodes, n)
			}
		}
	}
	merged := MergeComment(existing, job.Node, w.mine, job.Nodes)
	if merged != existing {
		if err := a.set(ctx, name, merged); err != nil {
			return err
		}
	}
	if existing, _, err = a.comment(ctx, job); err != nil {
		return err
	}
	if !commentHas(existing, w.mine) {
		return errLost
	}
	return nil
}

// comment reads the job's AdminComment (its latest run's) and the name
// that picks this job alone in sacctmgr: errNotYet when slurmdbd has no
// record, errSiteComment when it is not gpuslice's.
//
// A job id names more than one job to sacct and sacctmgr when it is an
// array's (every task: the task whose raw id is the array's job id, the
// last one Slurm starts, has the array's) or a heterogeneous job's (every
// component): that task's Epilog read another task's comment, and its
// write replaced every task's with its own (seff showed an array's task
// with another's peak). So the row whose JobIDRaw is this job's is the
// one read, and its JobID (110_3, 120+1) names it to sacctmgr.
func (a *Accounting) comment(ctx context.Context, job Job) (comment, name string, err error) {
	out, err := a.exec(ctx, a.Sacct, "-X", "-n", "-P", "-j", job.ID, "-o", "JobIDRaw,JobID,AdminComment")
	if err != nil && noAccounting(out) {
		return "", "", errNoAccounting
	}
	if err != nil {
		return "", "", fmt.Errorf("sacct: %w: %s", err, strings.TrimSpace(string(out)))
	}
	found := false
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		f := strings.SplitN(l, "|", 3)
		if len(f) == 3 && strings.TrimSpace(f[0]) == job.ID {
			// the latest run of this job id comes last
			name, comment, found = strings.TrimSpace(f[1]), strings.TrimSpace(f[2]), true
		}
	}
	if !found {
		return "", "", errNotYet
	}
	if !ours(comment) {
		return "", "", fmt.Errorf("%w: %q", errSiteComment, comment)
	}
	if comment == "(null)" {
		comment = ""
	}
	if name == "" {
		name = job.ID
	}
	return comment, name, nil
}

// set writes the AdminComment of the job sacctmgr knows by name.
func (a *Accounting) set(ctx context.Context, name, comment string) error {
	out, err := a.exec(ctx, a.Sacctmgr, "-i", "modify", "job", "where", "jobid="+name, "set", "AdminComment="+comment)
	text := strings.TrimSpace(string(out))
	if err != nil && noAccounting(out) {
		return errNoAccounting
	}
	if err != nil {
		return fmt.Errorf("sacctmgr: %w: %s", err, text)
	}
	if strings.Contains(text, "Nothing modified") {
		return errNotYet
	}
	return nil
}
