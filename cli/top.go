package cli

// top: a refreshing view of the node, like nvtop: one bar per GPU
// (capacity / committed / used) and one row per job (quota, used, peak,
// processes, denials). Root sees every job (admin socket); any other user
// sees their own jobs (IPC VIEW) and the node's totals.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

const topLong = `Redraws every --interval: per GPU a bar of used (#) and committed (=) memory against
its capacity, then one row per job. Root sees every job; any other user sees their own
jobs and the node's totals. Keys: q quits (also Ctrl-C). --once prints one frame.`

// topJob is one row: a job's figures summed over its GPUs.
type topJob struct {
	ID        string
	UID       uint32
	GPUs      []client.SessionGPU
	Processes int
}

// topFrame is what one refresh shows.
type topFrame struct {
	GPUs  []client.GPU
	Jobs  []topJob
	Scope string // "all jobs" or "your jobs"
	Err   error
}

func topCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	interval := fs.Duration("interval", time.Second, "time between refreshes")
	once := fs.Bool("once", false, "print one frame and exit")
	return func(args []string) error {
		if len(args) != 0 {
			return usagef("top takes no arguments")
		}
		if *interval < 100*time.Millisecond {
			return usagef("--interval %v: at least 100ms", *interval)
		}
		names := map[uint32]string{}
		if *once {
			f := e.topFetch()
			if f.Err != nil {
				return f.Err
			}
			return renderTop(e.stdout, f, names, 0)
		}
		return e.topLoop(*interval, names)
	}
}

// topFetch reads one frame: root from the admin socket, others (or root
// when the admin socket does not answer) through the IPC view.
func (e *env) topFetch() topFrame {
	if asRoot() {
		ctx, cancel := ctxTimeout()
		defer cancel()
		c := e.client()
		defer c.Close()
		gs, err := c.GPUs(ctx)
		if err == nil {
			var ss []client.Session
			ss, err = c.ListSessions(ctx)
			if err == nil {
				f := topFrame{GPUs: gs, Scope: "all jobs"}
				for _, s := range ss {
					f.Jobs = append(f.Jobs, topJob{ID: s.ID, UID: s.UID, GPUs: s.GPUs, Processes: len(s.Processes)})
				}
				return f
			}
		}
		if !errors.Is(err, client.ErrUnavailable) {
			return topFrame{Err: err}
		}
	}
	v := e.viewer()
	gs, err := v.GPUs()
	if err != nil {
		return topFrame{Err: err}
	}
	live, err := v.Live()
	if err != nil {
		return topFrame{Err: err}
	}
	f := topFrame{GPUs: gs, Scope: "your jobs"}
	uid := uint32(os.Getuid())
	for _, s := range live {
		if s.UID == uid || asRoot() {
			f.Jobs = append(f.Jobs, topJob{ID: s.ID, UID: s.UID, GPUs: s.GPUs, Processes: s.Processes})
		}
	}
	if asRoot() {
		f.Scope = "all jobs"
	}
	return f
}

// topLoop redraws until q, Ctrl-C or SIGTERM. On a terminal it uses the
// alternate screen and reads keys unbuffered.
func (e *env) topLoop(interval time.Duration, names map[uint32]string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	width := 0
	if f, ok := e.stdout.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
			width = int(ws.Col)
			fmt.Fprint(e.stdout, "\x1b[?1049h\x1b[?25l")
			defer fmt.Fprint(e.stdout, "\x1b[?25h\x1b[?1049l")
		}
	}
	keys := make(chan byte, 8)
	if f, ok := e.stdin.(*os.File); ok {
		if restore, err := rawKeys(int(f.Fd())); err == nil {
			defer restore()
			go func() {
				b := make([]byte, 1)
				for {
					if n, err := f.Read(b); n == 1 {
						keys <- b[0]
					} else if err != nil {
						return
					}
				}
			}()
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		f := e.topFetch()
		if f.Err != nil {
			f.Scope = "error"
		}
		var sb strings.Builder
		renderTop(&sb, f, names, width)
		fmt.Fprint(e.stdout, "\x1b[H\x1b[2J"+strings.ReplaceAll(sb.String(), "\n", "\r\n"))
		select {
		case <-ctx.Done():
			return nil
		case k := <-keys:
			if k == 'q' || k == 'Q' || k == 3 {
				return nil
			}
		case <-tick.C:
		}
	}
}

// rawKeys turns off line buffering and echo on fd; the returned function
// restores the terminal.
func rawKeys(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// bar draws used (#), committed but unused (=) and free (.) memory in n cells.
func bar(used, committed, capacity uint64, n int) string {
	if capacity == 0 || n <= 0 {
		return strings.Repeat(".", max(n, 0))
	}
	cells := func(b uint64) int {
		c := int(float64(b) / float64(capacity) * float64(n))
		if b > 0 && c == 0 {
			c = 1 // anything in use shows
		}
		return min(c, n)
	}
	u := cells(used)
	c := max(cells(committed), u)
	return strings.Repeat("#", u) + strings.Repeat("=", c-u) + strings.Repeat(".", n-c)
}

func userName(names map[uint32]string, uid uint32) string {
	if n, ok := names[uid]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(n); err == nil {
		n = u.Username
	}
	names[uid] = n
	return n
}

func pct(part, whole uint64) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", float64(part)*100/float64(whole))
}

// renderTop writes one frame; width 0 means 100 columns.
func renderTop(w io.Writer, f topFrame, names map[uint32]string, width int) error {
	if width <= 0 {
		width = 100
	}
	host, _ := os.Hostname()
	fmt.Fprintf(w, "gpuslice top  %s  %s  (%s; q quits)\n", host, time.Now().Format(time.TimeOnly), f.Scope)
	if f.Err != nil {
		fmt.Fprintf(w, "\n%v\n", f.Err)
		return nil
	}
	barW := max(10, min(60, width-60))
	for _, g := range f.GPUs {
		fmt.Fprintf(w, "\nGPU %d  %s  %s\n", g.Index, g.Name, g.UUID)
		fmt.Fprintf(w, "  [%s] used %s (%s)  committed %s (%s)  capacity %s  jobs %d\n",
			bar(g.UsedBytes, g.CommittedBytes, g.PhysicalBytes, barW),
			size.Format(g.UsedBytes), pct(g.UsedBytes, g.PhysicalBytes),
			size.Format(g.CommittedBytes), pct(g.CommittedBytes, g.PhysicalBytes),
			size.Format(g.PhysicalBytes), g.Sessions)
	}
	fmt.Fprintln(w)
	if len(f.Jobs) == 0 {
		fmt.Fprintf(w, "No job (%s) on this node.\n", f.Scope)
		return nil
	}
	sort.Slice(f.Jobs, func(i, j int) bool { return f.Jobs[i].ID < f.Jobs[j].ID })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tUSER\tGPUS\tQUOTA\tUSED\tPEAK\tPROCS\tDENIED")
	for _, j := range f.Jobs {
		var used, peak, denied uint64
		var idx []string
		for _, g := range j.GPUs {
			used += g.UsedBytes
			peak += g.PeakBytes
			denied += g.Denied
			idx = append(idx, gpuRef(g.Index, g.UUID))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", j.ID, userName(names, j.UID), strings.Join(idx, ","),
			quotaText(j.GPUs), size.Format(used), size.Format(peak), j.Processes, denied)
	}
	return tw.Flush()
}
