package slurm

// Slurm accounting for the test cluster: a private MariaDB (its own
// datadir, socket and loopback port under the cluster's directory; the
// machine's MariaDB is never touched) and a private slurmdbd, so that sacct
// shows what the Epilog recorded. Turned off with GPUSLICE_SLURM_ACCOUNTING=0.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// accountingPackages are the Debian packages accounting needs.
var accountingPackages = []string{"slurmdbd", "mariadb-server"}

type accounting struct {
	dbPort, dbdPort int
	dbDir           string
}

// accountingWanted: on unless GPUSLICE_SLURM_ACCOUNTING=0 or the run's
// Slurm release has none (slurmRelease.noAccounting).
func accountingWanted() bool {
	return os.Getenv("GPUSLICE_SLURM_ACCOUNTING") != "0" && slurm.noAccounting == ""
}

// prepareAccounting picks the ports and returns the slurm.conf lines.
func (c *cluster) prepareAccounting() error {
	if !accountingWanted() {
		return nil
	}
	debPackages = append(debPackages, accountingPackages...)
	if err := installPackages(); err != nil {
		return err
	}
	a := &accounting{dbDir: c.path("mariadb")}
	var err error
	for a.dbPort == a.dbdPort {
		if a.dbPort, err = freePort(); err != nil {
			return err
		}
		if a.dbdPort, err = freePort(); err != nil {
			return err
		}
	}
	c.acct = a
	// slurmdbd listens on the bridge's host address, which slurmctld and the
	// nodes' Epilogs (sacctmgr, in the nodes' network namespaces) reach.
	// AccountingStoragePass names the munge socket of connections to
	// slurmdbd (AuthInfo's does not apply to them). gres/shard is a job's
	// GPU memory in MiB of one GPU per node (docs/monitoring.md).
	c.opts.Accounting = []string{
		"JobAcctGatherType=jobacct_gather/none",
		"AccountingStorageType=accounting_storage/slurmdbd",
		"AccountingStorageHost=" + bridgeAddr,
		fmt.Sprintf("AccountingStoragePort=%d", a.dbdPort),
		"AccountingStoragePass=" + c.path("munge", "munge.sock"),
		"JobCompType=jobcomp/none",
	}
	if err := c.prepareBilling(); err != nil {
		return err
	}
	c.prepareNVMLAccounting()
	return nil
}

// startAccounting starts MariaDB and slurmdbd and registers the cluster.
// Call after writeSlurmConfig, before slurmctld starts.
func (c *cluster) startAccounting() error {
	a := c.acct
	if a == nil {
		return nil
	}
	if err := c.gresAutoDetect(); err != nil {
		return err
	}
	sock := filepath.Join(a.dbDir, "mysqld.sock")
	// Its temporary tables in a directory of its own, not this machine's
	// /tmp, which the other lanes' MariaDB and everything else share: a
	// lane's mariadb-install-db failed with "Error on delete of
	// '/tmp/#sql-temptable-2000-1-20.MAI' (Errcode: 2)" while two other
	// lanes started theirs.
	tmp := filepath.Join(a.dbDir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	inst := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+filepath.Join(a.dbDir, "data"),
		"--tmpdir="+tmp, "--user=root", "--auth-root-authentication-method=socket", "--skip-test-db",
		// The grants name addresses; no look-up of this machine's name
		// (which the Debian 13 root's /etc/hosts does not know).
		"--skip-name-resolve")
	if out, err := inst.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	db := exec.Command("mariadbd", "--no-defaults", "--datadir="+filepath.Join(a.dbDir, "data"), "--tmpdir="+tmp,
		"--socket="+sock, "--port="+fmt.Sprint(a.dbPort), "--bind-address=127.0.0.1",
		"--pid-file="+filepath.Join(a.dbDir, "mysqld.pid"), "--user=root", "--skip-log-bin",
		"--innodb-buffer-pool-size=32M", "--skip-name-resolve", "--log-error="+c.path("log", "mariadb.log"))
	if err := c.start("mariadbd", db); err != nil {
		return err
	}
	// The slurmdbd's database user, over loopback TCP only, and its
	// database. slurmdbd would create the database itself, after its
	// first connection failed for want of it, then connect again on the
	// same handle: with MariaDB's client library 3.4 (Debian 13) that
	// handle reads no result set afterwards (client error 5027, "Number of
	// columns in result (=1) set exceeds maximum allowed number of columns
	// (=0)"), and slurmdbd 24.11 exits at its first query.
	sql := "CREATE DATABASE slurm_acct_db; CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'gpuslice-test'; " +
		"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
	if err := waitFor(60*time.Second, func() error {
		out, err := exec.Command("mariadb", "--no-defaults", "--socket="+sock, "-u", "root", "-e", sql).CombinedOutput()
		if err != nil {
			return fmt.Errorf("create the slurm database user: %v: %s", err, out)
		}
		return nil
	}); err != nil {
		return err
	}
	conf := fmt.Sprintf(`AuthType=auth/munge
AuthInfo=socket=%[1]s/munge/munge.sock
DbdHost=%[2]s
DbdAddr=%[5]s
DbdPort=%[3]d
SlurmUser=root
DebugLevel=info
LogFile=%[1]s/log/slurmdbd.log
PidFile=%[1]s/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=%[4]d
StorageUser=slurm
StoragePass=gpuslice-test
StorageLoc=slurm_acct_db
`, c.dir, c.ctldHost, a.dbdPort, a.dbPort, bridgeAddr)
	conf += slurm.treeConf(c.build) // a release built from source: its plugins
	// slurmdbd reads slurmdbd.conf next to slurm.conf (SLURM_CONF); it must
	// be private to SlurmUser.
	if err := writeFile(c.path("slurmdbd.conf"), conf, 0o600); err != nil {
		return err
	}
	if err := c.start("slurmdbd", exec.Command("slurmdbd", "-D")); err != nil {
		return err
	}
	return waitFor(60*time.Second, func() error {
		out, err := c.cmd(nil, "sacctmgr", "-i", "add", "cluster", "gpuslicetest").CombinedOutput()
		if err != nil && !strings.Contains(string(out), "already exists") {
			return fmt.Errorf("sacctmgr add cluster: %v: %s", err, out)
		}
		return nil
	})
}

// sacct runs sacct as root for job id with fields, parsable, no header.
func (c *cluster) sacct(id string, fields string) (string, error) {
	out, err := c.cmd(nil, "sacct", "-X", "-n", "-P", "-j", id, "-o", fields).CombinedOutput()
	return string(out), err
}
