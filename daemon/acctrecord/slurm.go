package acctrecord

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/admincomment"
	"github.com/gpuslice/gpuslice/internal/hostlist"
)

// Slurm's accounting, as gpusliced writes to it: sacct reads a job's
// AdminComment, `sacctmgr modify job where jobid=N set AdminComment=...`
// writes it (Slurm refuses `scontrol update AdminComment=` once a job
// has ended), both through slurmdbd. Only an administrator can set the
// field; gpusliced runs as root.

// Slurm runs sacct and sacctmgr.
type Slurm struct {
	Sacct, Sacctmgr string
	// Conf is SLURM_CONF for the commands ("": what gpusliced has).
	Conf string
	// Timeout bounds each command.
	Timeout time.Duration
}

func (s Slurm) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = os.Environ()
	if s.Conf != "" {
		cmd.Env = append(cmd.Env, "SLURM_CONF="+s.Conf)
	}
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%s: no answer within %v", name, s.Timeout)
	}
	return out.Bytes(), err
}

// Why a record was not written this time.
var (
	// errNotYet: slurmdbd has no record of the job yet.
	errNotYet = errors.New("slurmdbd has no record of the job yet")
	// errNoAccounting: Slurm has no accounting storage (no slurmdbd).
	errNoAccounting = errors.New("Slurm has no accounting storage (AccountingStorageType is not accounting_storage/slurmdbd)")
	// errLost: another node's write replaced this node's figures.
	errLost = errors.New("another node's write replaced this node's figures")
	// errNotPlaced: neither the Epilog nor slurmdbd gave the job's node
	// list with this node (slurmctld has not sent the job's nodes yet).
	errNotPlaced = errors.New("slurmdbd does not hold the job's node list yet")
)

// noAccounting reports whether sacct's or sacctmgr's output says the
// cluster has no accounting storage: what Slurm 22.05-26.05 print then,
// from slurm.conf alone, without a connection.
func noAccounting(out []byte) bool {
	return bytes.Contains(out, []byte("accounting storage is disabled")) ||
		bytes.Contains(out, []byte("not running a supported accounting_storage plugin"))
}

// comment reads the job's AdminComment (its latest run's), the name
// that picks this job alone in sacctmgr and the job's nodes as slurmdbd
// holds them (a hostlist): errNotYet when slurmdbd has no record of it.
//
// A job id names more than one job to sacct and sacctmgr when it is an
// array's (every task: the task whose raw id is the array's job id, the
// last one Slurm starts, has the array's) or a heterogeneous job's (every
// component): reading the last row took another task's comment, and
// writing `where jobid=ID` replaced every task's. So the row whose
// JobIDRaw is this job's is the one read, and its JobID (110_3, 120+1)
// names it to sacctmgr.
//
// That name must pick this job alone, and while slurmdbd catches up with
// an array it may not: in CI's TestSeff the array's last task (raw id
// 155) was written while its tasks 155_1 and 155_2 already had rows, and
// both got its figures (then took them for their own). slurmdbd shows the
// array's own row by the bare id for a moment (155, which picks every
// task), and its start update for each task split off (job_array_split
// gives that task the array's db_index) can name it by that task (155_1,
// which picks that task too). A name that picks another job too is
// errNotYet (alone): slurmdbd soon names the job by its own task.
//
// Nor is the job's row its own until slurmdbd shows the job ended: with
// the name check alone, TestSeff's array still failed 3 times in 8 runs
// here (the last task's write, made while its row was not yet its
// record's, reached tasks 155_1 and 155_2); with this check too, 0 in
// 10 under load. The Epilog runs once the job has ended, so a row that
// does not say so is slurmdbd behind: errNotYet. (A job slurmdbd never
// sees end, a runaway, is given up after UnknownJobAge.)
func (s Slurm) comment(ctx context.Context, id string) (comment, name, nodes string, err error) {
	rows, err := s.rows(ctx, id, "JobIDRaw,JobID,State,NodeList,AdminComment")
	if err != nil {
		return "", "", "", err
	}
	found, state := false, ""
	for _, f := range rows {
		if len(f) == 5 && f[0] == id {
			// the latest run of this job id comes last
			name, state, nodes, comment, found = f[1], f[2], f[3], f[4], true
		}
	}
	if !found {
		return "", "", "", errNotYet
	}
	if !ended(state) {
		return "", "", "", fmt.Errorf("%w as ended (sacct shows %s %s)", errNotYet, name, state)
	}
	if name == "" {
		name = id
	}
	if err := s.alone(ctx, id, name, rows); err != nil {
		return "", "", "", err
	}
	return comment, name, nodes, nil
}

// ended reports whether sacct's State is one a job's run ends in: not
// pending, running or on its way (CANCELLED shows as "CANCELLED by 0").
func ended(state string) bool {
	first, _, _ := strings.Cut(strings.TrimSpace(state), " ")
	switch first {
	case "PENDING", "RUNNING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED", "COMPLETING", "CONFIGURING",
		"SIGNALING", "STAGE_OUT", "":
		return false
	}
	return true
}

// rows runs sacct -X for job (an id or a name) with the fields fields
// (the AdminComment last: it may hold a site's "|"), one slice per line.
func (s Slurm) rows(ctx context.Context, job, fields string) ([][]string, error) {
	out, err := s.run(ctx, s.Sacct, "-X", "-n", "-P", "-j", job, "-o", fields)
	if err != nil && noAccounting(out) {
		return nil, errNoAccounting
	}
	if err != nil {
		return nil, fmt.Errorf("sacct: %w: %s", err, strings.TrimSpace(string(out)))
	}
	n := strings.Count(fields, ",") + 1
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l == "" {
			continue
		}
		f := strings.SplitN(l, "|", n)
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		rows = append(rows, f)
	}
	return rows, nil
}

// alone returns errNotYet when name, which sacct gives job id (its raw
// id), would pick another job too in sacctmgr: rows are sacct's lines
// for id (JobIDRaw first, JobID second). A bare id picks every line of
// id's (an array's tasks, a heterogeneous job's components); a task's or
// component's name (A_T, H+C) picks the lines of that name, which id's
// lines hold when id is A or H, and one more sacct finds otherwise.
func (s Slurm) alone(ctx context.Context, id, name string, rows [][]string) error {
	var others []string
	other := func(raw string) {
		if raw != id && !slices.Contains(others, raw) {
			others = append(others, raw)
		}
	}
	base, _, sub := strings.Cut(strings.Replace(name, "+", "_", 1), "_")
	switch {
	case !sub && name == id:
		for _, f := range rows {
			other(f[0])
		}
	case base == id:
		for _, f := range rows {
			if len(f) > 1 && f[1] == name {
				other(f[0])
			}
		}
	default:
		named, err := s.rows(ctx, name, "JobIDRaw")
		if err != nil {
			return err
		}
		for _, f := range named {
			other(f[0])
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("%w as a job of its own (sacct names it %s, which also picks job %s)", errNotYet, name,
			strings.Join(others, ","))
	}
	return nil
}

// place puts a record not yet placed at its node's index in the job's
// node list as slurmdbd holds it (sacct's NodeList, the list seff
// expands), which must name the node and, the node count known, have as
// many. Once placed a record keeps its place: a node counted at two
// places would count twice.
func place(it *item, jobNodes string) error {
	if it.placed {
		return nil
	}
	list, err := hostlist.Expand(jobNodes)
	if err != nil {
		return fmt.Errorf("%w (sacct's NodeList %q: %v)", errNotPlaced, jobNodes, err)
	}
	idx, ok := placement(it.rec.Node, list, it.rec.NodeCount)
	if !ok {
		return fmt.Errorf("%w (sacct's NodeList %q, %d nodes)", errNotPlaced, jobNodes, it.rec.NodeCount)
	}
	it.node.Index, it.node.Nodes, it.nodes, it.placed, it.alone = idx, len(list), list, true, len(list) == 1
	return nil
}

// set writes the AdminComment of the job sacctmgr knows by name.
func (s Slurm) set(ctx context.Context, name, comment string) error {
	out, err := s.run(ctx, s.Sacctmgr, "-i", "modify", "job", "where", "jobid="+name, "set", "AdminComment="+comment)
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

// write merges one node's figures into the job's comment: read, merge,
// write, read back. A comment that already holds them is not written
// (a record sent before gpusliced was killed, not yet dequeued); one
// another node's concurrent write replaced is errLost (the caller writes
// again). wrote reports whether sacctmgr was run.
func (s Slurm) write(ctx context.Context, it *item) (final string, wrote bool, err error) {
	id := it.rec.JobID
	existing, name, jobNodes, err := s.comment(ctx, id)
	if err != nil {
		return "", false, err
	}
	if err := place(it, jobNodes); err != nil {
		return "", false, err
	}
	n, nodes := it.node, it.nodes
	if admincomment.Contains(existing, n) {
		return existing, false, nil
	}
	merged, err := admincomment.Merge(existing, n, nodes)
	if err != nil {
		return "", false, err
	}
	if err := s.set(ctx, name, merged); err != nil {
		return "", true, err
	}
	back, _, _, err := s.comment(ctx, id)
	if err != nil {
		return "", true, err
	}
	if !admincomment.Contains(back, n) {
		return back, true, errLost
	}
	return back, true, nil
}
