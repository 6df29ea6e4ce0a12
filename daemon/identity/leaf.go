package identity

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
)

// Leaf is the cgroup v2 directory pid runs in, when that directory is
// inside a job's: at or below a root-owned gpuslice-run-<session>, or
// strictly below a root-owned job_<id> (or SLUID) directory, and not
// slurmstepd's own (a step's "slurm" directory: the step's slurmstepd
// runs there, the tasks under "user"). job is the job (or run session)
// the directory belongs to; both "" when pid runs in no such directory
// (or is gone, or runs on a cgroup v1 hierarchy only).
//
// What is returned is a directory only the job's processes run in, which
// may be frozen without touching Slurm's own processes or anything
// outside the job (daemon/compute, "Freezing").
func (r Resolver) Leaf(pid uint32) (job, dir string) {
	b, err := readSmall(filepath.Join(r.proc(), strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", ""
	}
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		path, ok := bytes.CutPrefix(line, []byte("0::"))
		if !ok {
			continue
		}
		comps := strings.Split(strings.TrimPrefix(string(path), "/"), "/")
		base := filepath.Join(r.cgroup(), V2Dir(r.cgroup()))
		for i, c := range comps {
			id := r.jobOfComponent(c)
			if id == "" || !rootOwnedDir(filepath.Join(append([]string{base}, comps[:i+1]...)...)) {
				continue
			}
			run := strings.HasPrefix(c, RunCgroupPrefix)
			if !run && i == len(comps)-1 {
				return "", "" // the job's own directory: its steps' slurmstepd run below it
			}
			if comps[len(comps)-1] == "slurm" {
				return "", "" // slurmstepd's
			}
			return id, filepath.Join(append([]string{base}, comps...)...)
		}
	}
	return "", ""
}
