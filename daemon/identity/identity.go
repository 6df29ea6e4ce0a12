// Package identity decides which Slurm job a process belongs to from the
// kernel's view of it, never from its environment: first the process's
// cgroup (proctrack/cgroup places every task under a root-owned
// .../job_<id>/ directory, or from Slurm 26.05 on cgroup v2 a directory
// named by the job's SLUID), else its ancestry up to the root-owned
// slurmstepd of its step (whose title is "slurmstepd: [<jobid>.<step>]").
// docs/audit.md "Who a process belongs to" says what escapes each method.
package identity

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/api"
)

// MaxDepth bounds the ancestry walk.
const MaxDepth = 64

// Resolver reads /proc and the cgroup filesystem (under Proc and Cgroup,
// so tests can point it at a prepared tree).
type Resolver struct {
	Proc   string // default /proc
	Cgroup string // default /sys/fs/cgroup
	// Cache, when set, remembers what the ancestry walk found above each
	// ancestor it visited (NewCache).
	Cache *Cache
	// SLUID, when set, returns the job whose session was created with
	// that SLUID (Slurm 26.05 names a job's cgroup v2 directory
	// /<SLUID>, as print_sluid writes it), "" for a SLUID it does not
	// know. The daemon gives the session manager's lookup: the SLUID came
	// from the root Prolog (SLURM_JOB_SLUID), never from the job. Nil:
	// SLUID directories are not looked at.
	SLUID func(sluid string) (job string)
}

// Cache holds, for an ancestor process known by pid and start time (both
// from the kernel: a pid reused by a later process is another key), the
// job the ancestry walk found from it up to init: the job of the first
// root slurmstepd, or none. The processes of a step share their ancestors
// (the step's slurmstepd, the user's shell), so after the first attach of
// a step the walk stops at the attaching process's parent.
//
// What is kept stays true: a process's start time never changes, a root
// slurmstepd never becomes another program, and reparenting (an ancestor
// exits) only ever moves a process up its own tree, towards init, so an
// ancestor with no slurmstepd above it never gains one. A process that
// left its step (its parent's exit reparented it to init) is still known
// by the job it was started in.
type Cache struct {
	mu sync.Mutex
	m  map[procKey]string
}

type procKey struct {
	pid   uint32
	start uint64
}

// cacheMax bounds the cache; a full cache starts again empty.
const cacheMax = 16384

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{m: map[procKey]string{}} }

func (c *Cache) get(k procKey) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	job, ok := c.m[k]
	return job, ok
}

func (c *Cache) put(keys []procKey, job string) {
	if c == nil || len(keys) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m)+len(keys) > cacheMax {
		c.m = map[procKey]string{}
	}
	for _, k := range keys {
		c.m[k] = job
	}
}

// Len is the number of ancestors remembered.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// How says which method found the job.
type How string

// Methods.
const (
	None     How = ""
	ByCgroup How = "cgroup"
	ByStepd  How = "slurmstepd"
)

func (r Resolver) proc() string {
	if r.Proc == "" {
		return "/proc"
	}
	return r.Proc
}

func (r Resolver) cgroup() string {
	if r.Cgroup == "" {
		return "/sys/fs/cgroup"
	}
	return r.Cgroup
}

// Job returns the Slurm job id pid runs in, and how it was found; "" and
// None when pid is in no Slurm job (or has gone).
func (r Resolver) Job(pid uint32) (string, How) { return r.JobFrom(pid, 0) }

// JobFrom is Job for a pid whose parent is ppid as the caller just read it
// from /proc/<pid>/stat (0: unknown, read here).
func (r Resolver) JobFrom(pid, ppid uint32) (string, How) {
	if job := r.byCgroup(pid); job != "" {
		return job, ByCgroup
	}
	if job := r.byAncestry(pid, ppid); job != "" {
		return job, ByStepd
	}
	return "", None
}

// RunCgroupPrefix starts the name of the cgroup `gpuslice run` starts its
// command in (RunCgroupPrefix + session id, made by root): the session is
// found from it as a Slurm job is from job_<id>.
const RunCgroupPrefix = "gpuslice-run-"

// byCgroup finds, in one of pid's cgroup paths, a component naming a job
// whose directory is owned by root: job_<id> (cgroup v1, cgroup v2 up to
// Slurm 25.11, and 26.05 with CgroupJobIdPaths=yes), a SLUID a session
// was created with (26.05's cgroup v2 default), or gpuslice-run-<session>.
// Slurm (or `gpuslice run`, as root) creates such a directory, and a user
// cannot move a process into a root-owned cgroup. A directory so named
// that a user made in a subtree delegated to them (systemd user sessions)
// is theirs, not root's, and does not count; neither does a SLUID no
// session has.
func (r Resolver) byCgroup(pid uint32) string {
	b, err := readSmall(filepath.Join(r.proc(), strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return ""
	}
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		if r.SLUID == nil && !bytes.Contains(line, []byte("job_")) && !bytes.Contains(line, []byte(RunCgroupPrefix)) {
			continue
		}
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(string(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		comps := strings.Split(parts[2], "/")
		for i, c := range comps {
			id := r.jobOfComponent(c)
			if id == "" {
				continue
			}
			dir := filepath.Join(append([]string{r.cgroup(), controllerDir(r.cgroup(), parts[1])}, comps[:i+1]...)...)
			if rootOwnedDir(dir) {
				return id
			}
		}
	}
	return ""
}

// jobOfComponent is the job (or run session) a cgroup path component
// names, "" when none.
func (r Resolver) jobOfComponent(c string) string {
	if id, ok := strings.CutPrefix(c, "job_"); ok {
		if isJobID(id) {
			return id
		}
		return ""
	}
	if id, ok := strings.CutPrefix(c, RunCgroupPrefix); ok {
		if api.ValidSessionID(id) {
			return id
		}
		return ""
	}
	if r.SLUID != nil && api.IsCanonicalSLUID(c) {
		return r.SLUID(c)
	}
	return ""
}

// readSmall reads a /proc file of at most 64 KiB with plain system calls:
// an os.File costs a poller registration and four fcntl calls besides, on
// a path every attach takes.
func readSmall(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 1024)
	for len(buf) < 64<<10 {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return buf, nil
}

// controllerDir is where, under root, the hierarchy of a /proc/<pid>/cgroup
// line is mounted: a cgroup v1 hierarchy under its first controller's
// name; the v2 hierarchy at root itself, or at root/unified on a hybrid
// machine (v1 controllers at root, systemd's hybrid layout).
func controllerDir(root, controllers string) string {
	if controllers == "" {
		return V2Dir(root)
	}
	// v1 hierarchies Slurm uses are mounted under their first controller
	// name (memory, freezer, cpuset, ...); name=systemd under systemd.
	c := strings.Split(controllers, ",")[0]
	return strings.TrimPrefix(c, "name=")
}

var v2dirs sync.Map // root -> "" or "unified"

// V2Dir is where under root (the cgroup mount point, /sys/fs/cgroup) the
// cgroup v2 hierarchy is: "" when root is it, "unified" on a hybrid
// machine. Asked once per root.
func V2Dir(root string) string {
	if v, ok := v2dirs.Load(root); ok {
		return v.(string)
	}
	dir := ""
	var st unix.Statfs_t
	if unix.Statfs(root, &st) == nil && st.Type != unix.CGROUP2_SUPER_MAGIC &&
		unix.Statfs(filepath.Join(root, "unified"), &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		dir = "unified"
	}
	v2dirs.Store(root, dir)
	return dir
}

func rootOwnedDir(dir string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return false
	}
	return st.Mode&syscall.S_IFMT == syscall.S_IFDIR && st.Uid == 0
}

func isJobID(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// byAncestry walks from pid's parent up to init looking for the step's
// slurmstepd: a process whose real and effective uid are 0, whose
// executable is named slurmstepd and whose title names the job. A user
// cannot start such a process; a process that left the tree (double fork,
// reparented to init or a subreaper) is not found this way. With a Cache
// the walk stops at the first ancestor whose answer is known.
func (r Resolver) byAncestry(pid, ppid uint32) string {
	p := ppid
	if p == 0 {
		st, ok := r.stat(pid)
		if !ok {
			return ""
		}
		p = st.ppid
	}
	var seen []procKey
	for depth := 0; depth < MaxDepth && p > 1; depth++ {
		pst, ok := r.stat(p)
		if !ok {
			return ""
		}
		k := procKey{pid: p, start: pst.start}
		if pst.start != 0 {
			if job, ok := r.Cache.get(k); ok {
				r.Cache.put(seen, job)
				return job
			}
			seen = append(seen, k)
		}
		if job := r.stepdJob(p); job != "" {
			r.Cache.put(seen, job)
			return job
		}
		p = pst.ppid
	}
	if p <= 1 {
		r.Cache.put(seen, "") // init reached: no slurmstepd above any of them
	}
	return ""
}

func (r Resolver) dir(pid uint32) string {
	return filepath.Join(r.proc(), strconv.FormatUint(uint64(pid), 10))
}

type procStat struct {
	ppid  uint32
	start uint64 // 0 when the line has no field 22 (a prepared tree)
}

// stat reads the ppid (field 4) and start time (field 22) of
// /proc/<pid>/stat.
func (r Resolver) stat(pid uint32) (procStat, bool) {
	b, err := readSmall(filepath.Join(r.dir(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return procStat{}, false
	}
	v, err := strconv.ParseUint(string(f[1]), 10, 32)
	if err != nil {
		return procStat{}, false
	}
	st := procStat{ppid: uint32(v)}
	if len(f) > 19 {
		st.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	}
	return st, true
}

// stepdJob returns the job of pid when pid is a root slurmstepd.
func (r Resolver) stepdJob(pid uint32) string {
	d := r.dir(pid)
	exe, err := os.Readlink(filepath.Join(d, "exe"))
	if err != nil || !isStepdExe(exe) {
		return ""
	}
	if !rootProcess(filepath.Join(d, "status")) {
		return ""
	}
	cmd, err := readSmall(filepath.Join(d, "cmdline"))
	if err != nil {
		return ""
	}
	return ParseStepdTitle(string(bytes.TrimRight(cmd, "\x00")))
}

// isStepdExe: the executable is Slurm's step daemon, "slurmstepd" or a
// distribution's build of it behind an alternatives link ("slurmstepd-wlm"
// on Debian).
func isStepdExe(exe string) bool {
	b := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	return b == "slurmstepd" || strings.HasPrefix(b, "slurmstepd-")
}

// rootProcess reads the Uid: line of a status file: real, effective, saved
// and filesystem uid must all be 0.
func rootProcess(status string) bool {
	f, err := os.Open(status)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		ids := strings.Fields(rest)
		if len(ids) != 4 {
			return false
		}
		for _, id := range ids {
			if id != "0" {
				return false
			}
		}
		return true
	}
	return false
}

// ParseStepdTitle returns the job id in a slurmstepd process title
// ("slurmstepd: [1234.0]", "[1234.batch]", "[1234.extern]"), or "".
func ParseStepdTitle(title string) string {
	rest, ok := strings.CutPrefix(title, "slurmstepd: [")
	if !ok {
		return ""
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return ""
	}
	job, _, _ := strings.Cut(rest[:end], ".")
	if !isJobID(job) {
		return ""
	}
	return job
}
