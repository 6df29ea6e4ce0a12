package slurm

// A job's usage at its end (docs/billing.md, "Usage and fair-share"):
// slurmctld's priority/multifactor adds each running job's billing times
// the seconds since its last pass at every pass (PriorityCalcPeriod). At a
// job's end it adds the seconds since the last pass only through
// priority_p_job_end, which slurmctld calls from acct_policy.c's
// _adjust_limit_usage, and only when AccountingStorageEnforce includes
// limits (also set by safe and all). Without it, what a job ran after the
// last pass before its end is never counted. Real slurmctld, slurmdbd and
// MariaDB; the figures are sshare's and sacct's.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// usageAccount is the Slurm account of TestUsageAtJobEnd's user.
const usageAccount = "gsusage"

// setAccountingStorageEnforce restarts slurmctld with slurm.conf's
// AccountingStorageEnforce set to v ("" removes it) and waits until every
// node is idle again. slurmctld takes the setting when it starts only
// (controller.c sets accounting_enforce from it). Jobs and usage live on
// in StateSaveLocation; the nodes keep their slurmd.
func (c *cluster) setAccountingStorageEnforce(v string) error {
	b, err := os.ReadFile(c.conf)
	if err != nil {
		return err
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.HasPrefix(l, "AccountingStorageEnforce=") {
			lines = append(lines, l)
		}
	}
	if v != "" {
		lines = append(lines, "AccountingStorageEnforce="+v)
	}
	if err := writeFile(c.conf, strings.Join(lines, "\n")+"\n", 0o644); err != nil {
		return err
	}
	c.opts.AccountingStorageEnforce = v
	c.kill("slurmctld", syscall.SIGTERM, 30*time.Second)
	if err := c.startSlurmctld(); err != nil {
		return err
	}
	if err := c.waitNodeState("idle", 90*time.Second); err != nil {
		return err
	}
	out, err := c.cmd(nil, "scontrol", "show", "config").CombinedOutput()
	if err != nil {
		return fmt.Errorf("scontrol show config: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if k, got, ok := strings.Cut(l, "="); ok && strings.TrimSpace(k) == "AccountingStorageEnforce" {
			if strings.Contains(got, "limits") != strings.Contains(v, "limits") {
				return fmt.Errorf("slurmctld restarted with AccountingStorageEnforce=%q has %q", v, strings.TrimSpace(got))
			}
			return nil
		}
	}
	return fmt.Errorf("scontrol show config has no AccountingStorageEnforce:\n%s", out)
}

// priorityPass is when priority/multifactor last ran its pass: the time it
// writes first (Slurm's pack_time: 64 bits, big-endian) to
// StateSaveLocation/priority_last_decay_ran at the end of every pass, its
// g_last_ran. Zero before the first.
func (c *cluster) priorityPass() (int64, error) {
	b, err := os.ReadFile(c.path("state", "priority_last_decay_ran"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(b) < 8 {
		return 0, fmt.Errorf("priority_last_decay_ran: %d bytes", len(b))
	}
	return int64(binary.BigEndian.Uint64(b[:8])), nil
}

// waitPass waits for a pass at or after since (Unix seconds) and returns
// its time. A pass comes every PriorityCalcPeriod (a minute here) and at
// slurmctld's start.
func (c *cluster) waitPass(t *testing.T, since int64) int64 {
	t.Helper()
	var p int64
	if err := waitFor(3*time.Minute, func() error {
		var err error
		if p, err = c.priorityPass(); err != nil {
			return err
		}
		if p < since {
			return fmt.Errorf("last priority pass at %d, none since %d", p, since)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// rawUsage is sshare's RawUsage of user's association in account: the
// billing times seconds slurmctld has added.
func (c *cluster) rawUsage(account, user string) (uint64, error) {
	out, err := c.cmd(nil, "sshare", "-n", "-P", "-a", "-A", account, "-o", "User,RawUsage").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("sshare: %v: %s", err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if u, raw, ok := strings.Cut(l, "|"); ok && strings.TrimSpace(u) == user {
			return strconv.ParseUint(strings.TrimSpace(raw), 10, 64)
		}
	}
	return 0, fmt.Errorf("sshare has no %s under %s: %q", user, account, out)
}

// jobUsage is what one job added to its user's usage.
type jobUsage struct {
	id               string
	billing, elapsed uint64 // sacct: AllocTRES's billing, ElapsedRaw
	start, end       int64  // sacct: Start, End (Unix seconds)
	pass, nextPass   int64  // the pass before the job's start, the next
	atEnd            uint64 // RawUsage once the job has ended, before the next pass
	afterPass        uint64 // RawUsage after the next pass
}

// shortJobUsage resets u's usage in usageAccount, runs a 4 GiB job of 15 s
// right after a priority pass (at or after since), so that it starts and
// ends between two passes, and reads u's RawUsage once it has ended and
// again after the next pass. When a pass fell during the job after all
// (a slow start), it runs the job again.
func (c *cluster) shortJobUsage(t *testing.T, u *testUser, since int64) jobUsage {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out, err := c.cmd(nil, "sacctmgr", "-i", "modify", "user", "where", "name="+u.name, "account="+usageAccount,
			"set", "RawUsage=0").CombinedOutput()
		if err != nil {
			t.Fatalf("sacctmgr reset the usage of %s: %v: %s", u.name, err, out)
		}
		if err := waitFor(30*time.Second, func() error {
			raw, err := c.rawUsage(usageAccount, u.name)
			if err == nil && raw != 0 {
				err = fmt.Errorf("usage of %s not reset: %d", u.name, raw)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		r := jobUsage{pass: c.waitPass(t, since)}
		r.id = c.sbatch(t, u, "usage", "#!/bin/sh\nsleep 15\n", "-p", "big", "--gpu-mem=4G", "-A", usageAccount)
		c.waitJobEnd(t, r.id, 2*time.Minute)
		var last int64
		if err := waitFor(30*time.Second, func() error {
			before, err := c.priorityPass()
			if err != nil {
				return err
			}
			if r.atEnd, err = c.rawUsage(usageAccount, u.name); err != nil {
				return err
			}
			if last, err = c.priorityPass(); err == nil && last != before {
				err = fmt.Errorf("a pass at %d while sshare ran", last)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if last != r.pass {
			if attempt == 3 {
				t.Fatalf("job %s: a priority pass fell between its submission (after the pass at %d) and its end, three times", r.id, r.pass)
			}
			t.Logf("job %s: a priority pass fell between its submission (after the pass at %d) and its end (%d); again", r.id, r.pass, last)
			since = last + 1
			continue
		}
		r.nextPass = c.waitPass(t, r.pass+1)
		if r.afterPass, err = c.rawUsage(usageAccount, u.name); err != nil {
			t.Fatal(err)
		}
		j := c.jobBilling(t, r.id)
		r.billing, r.elapsed = j.billing, j.elapsed
		cmd := c.cmd(nil, "sacct", "-X", "-n", "-P", "-j", r.id, "-o", "Start,End")
		cmd.Env = append(cmd.Env, "SLURM_TIME_FORMAT=%s")
		out, err = cmd.CombinedOutput()
		start, end, _ := strings.Cut(strings.TrimSpace(string(out)), "|")
		r.start, _ = strconv.ParseInt(start, 10, 64)
		r.end, _ = strconv.ParseInt(end, 10, 64)
		if err != nil || r.start == 0 || r.end == 0 {
			t.Fatalf("sacct -o Start,End of job %s (SLURM_TIME_FORMAT=%%s): %v: %q", r.id, err, out)
		}
		if r.billing != 4 || r.elapsed == 0 || !(r.pass <= r.start && r.end <= r.nextPass) {
			t.Fatalf("job %s: %s, %d s from %d to %d, passes at %d and %d: want billing=4, run between the passes",
				r.id, j.tres, r.elapsed, r.start, r.end, r.pass, r.nextPass)
		}
		return r
	}
}

// A 4 GiB job of 15 s that starts and ends between two priority passes,
// with AccountingStorageEnforce=limits and without it (the suite's
// cluster sets none). With limits, slurmctld adds the job's whole usage at
// its end (billing 4 times its seconds) and the next pass adds nothing
// more. Without, nothing is added at its end nor at the next pass: a job
// between two passes is never counted.
func TestUsageAtJobEnd(t *testing.T) {
	c := needAccounting(t)
	u := c.users["gsltest1"]
	for _, args := range [][]string{
		{"-i", "add", "account", usageAccount},
		{"-i", "add", "user", u.name, "account=" + usageAccount},
	} {
		out, err := c.cmd(nil, "sacctmgr", args...).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "already exist") && !strings.Contains(string(out), "Nothing new added") {
			t.Fatalf("sacctmgr %v: %v: %s", args, err, out)
		}
	}
	if err := waitFor(60*time.Second, func() error {
		_, err := c.rawUsage(usageAccount, u.name)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	was := c.opts.AccountingStorageEnforce
	t.Cleanup(func() {
		if c.opts.AccountingStorageEnforce != was {
			if err := c.setAccountingStorageEnforce(was); err != nil {
				t.Errorf("slurmctld back to AccountingStorageEnforce=%q: %v", was, err)
			}
		}
	})
	for _, tc := range []struct {
		name, enforce string
		atEnd         bool // the job's usage is added at its end
	}{
		{"limits", "limits", true},
		{"unset", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			since := time.Now().Unix()
			if err := c.setAccountingStorageEnforce(tc.enforce); err != nil {
				t.Fatalf("slurmctld with AccountingStorageEnforce=%q: %v", tc.enforce, err)
			}
			r := c.shortJobUsage(t, u, since)
			t.Logf("AccountingStorageEnforce=%q: job %s, billing %d, %d s (%d s after a pass, ending %d s before the next); "+
				"RawUsage at its end %d, after the next pass %d", tc.enforce, r.id, r.billing, r.elapsed,
				r.start-r.pass, r.nextPass-r.end, r.atEnd, r.afterPass)
			want := uint64(0)
			if tc.atEnd {
				want = r.billing * r.elapsed
			}
			if r.atEnd != want || r.afterPass != want {
				t.Errorf("AccountingStorageEnforce=%q: RawUsage %d at the job's end, %d after the next pass; want %d both (billing %d x %d s: %v)",
					tc.enforce, r.atEnd, r.afterPass, want, r.billing, r.elapsed, tc.atEnd)
			}
		})
	}
}
