package compute

import (
	"fmt"
	"testing"
)

// A share is a session's, whatever the number of its processes: the GPU
// round-robins between processes, so a job of 10 with two busy processes
// beside a one-process job of 90 got 66.7 %, with four 80 %, and was never
// held (the controller read "the neighbour's one process got less than my
// two" as "the neighbour wanted no more"). Each side runs 1, 2, 4 or 8
// processes; the small job also starts first or last.
func TestSharesPerSessionAnyProcessCount(t *testing.T) {
	// A held session's processes finish the kernels they had queued (here
	// 64 ms each): the more processes, the longer a hold takes to bite and
	// the larger the swing of its lag, paid back over the next seconds. So
	// eight processes are measured over 20 s: the share is exact to about
	// processes x queued work over the window.
	for _, tc := range []struct {
		weights [2]int
		procs   [2]int
		last    bool // the small job starts after the big one
	}{
		{[2]int{10, 90}, [2]int{2, 1}, false},
		{[2]int{10, 90}, [2]int{4, 1}, true},
		{[2]int{10, 90}, [2]int{8, 1}, false},
		{[2]int{25, 75}, [2]int{3, 1}, false},
		{[2]int{25, 75}, [2]int{4, 2}, true},
		{[2]int{75, 25}, [2]int{1, 4}, false},
	} {
		t.Run(fmt.Sprintf("%d×%d_%d×%d", tc.procs[0], tc.weights[0], tc.procs[1], tc.weights[1]), func(t *testing.T) {
			d := startDaemon(t)
			ids := [2]string{"small", "big"}
			for i, id := range ids {
				session(t, d, id, 8<<30, percent(tc.weights[i], 0))
			}
			order := []int{0, 1}
			if tc.last {
				order = []int{1, 0}
			}
			jobs := [2][]*job{}
			for _, i := range order {
				for range tc.procs[i] {
					jobs[i] = append(jobs[i], launch(t, d, ids[i]))
				}
			}
			settle()
			w := window
			if tc.procs[0]+tc.procs[1] > 6 {
				w = "20"
			}
			busy, win := measure(t, d, w)
			checkShares(t, fmt.Sprintf("%d processes of weight %d beside %d of weight %d", tc.procs[0], tc.weights[0], tc.procs[1], tc.weights[1]),
				[]float64{float64(tc.weights[0]), float64(tc.weights[1])}, busy, win, group(jobs[0]...), group(jobs[1]...))
			expectNoFreeze(t, d)
		})
	}
}

// Alone, a session with several processes has the whole GPU.
func TestLoneMultiProcessSession(t *testing.T) {
	d := startDaemon(t)
	session(t, d, "lone", 8<<30, percent(10, 0))
	var jobs []*job
	for range 4 {
		jobs = append(jobs, launch(t, d, "lone"))
	}
	settle()
	busy, win := measure(t, d, window)
	var ms float64
	for _, j := range jobs {
		ms += busy[j.pid]
	}
	got := 100 * ms / win
	t.Logf("lone session of 4 processes with weight 10: %.1f%% of the GPU's time", got)
	if got < 95 {
		t.Errorf("a lone session of 4 processes got %.1f%% of the GPU; want >= 95", got)
	}
	expectNoFreeze(t, d)
}
