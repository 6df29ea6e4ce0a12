package acctrecord

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
)

// DefaultSlurmConf is where Slurm's commands read slurm.conf when
// SLURM_CONF is unset.
const DefaultSlurmConf = "/etc/slurm/slurm.conf"

// Off returns why records are not kept ("" when they are), from the
// accounting setting (auto, on, off), sacctmgr and slurm.conf. auto: on
// when sacctmgr is there and slurm.conf's AccountingStorageType is
// accounting_storage/slurmdbd. A slurm.conf gpusliced cannot read (a
// configless node, or one whose slurm.conf is written after gpusliced
// starts) leaves it on: sacct then says itself whether there is
// accounting storage, and records are dropped when it says none.
// gpusliced asks at each ended job, so a change of slurm.conf needs no
// restart.
func Off(mode, sacctmgr, slurmConf string) string {
	switch mode {
	case "off":
		return "accounting is off in gpusliced's configuration"
	case "on":
		return ""
	}
	if fi, err := os.Stat(sacctmgr); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Sprintf("no sacctmgr at %s (Slurm's client commands are not installed here)", sacctmgr)
	}
	if slurmConf == "" {
		slurmConf = os.Getenv("SLURM_CONF")
	}
	if slurmConf == "" {
		slurmConf = DefaultSlurmConf
	}
	typ, err := storageType(slurmConf)
	if err != nil {
		return ""
	}
	if typ != "accounting_storage/slurmdbd" {
		if typ == "" {
			typ = "unset (accounting_storage/none)"
		}
		return fmt.Sprintf("%s: AccountingStorageType is %s: Slurm has no slurmdbd", slurmConf, typ)
	}
	return ""
}

// storageType reads AccountingStorageType from slurm.conf ("" when it is
// not set there).
func storageType(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	typ := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		for _, field := range strings.Fields(line) {
			k, v, ok := strings.Cut(field, "=")
			if ok && strings.EqualFold(k, "AccountingStorageType") {
				typ = strings.ToLower(strings.TrimSpace(v))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", errors.Join(fmt.Errorf("read %s", path), err)
	}
	return typ, nil
}
