package slurm

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/client"
)

// sampler watches the cluster while jobs run: sinfo (any node drained?)
// and every node's gpusliced (the quotas committed on each GPU against its
// capacity, and how many sessions share a GPU).
type sampler struct {
	c        *cluster
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	samples  int
	drains   []string
	overruns []string
	errs     []string
	// maxShare is the most sessions seen on one GPU at once, per node.
	maxShare map[string]int
}

func (c *cluster) startSampler() *sampler {
	s := &sampler{c: c, stop: make(chan struct{}), done: make(chan struct{}), maxShare: map[string]int{}}
	go func() {
		defer close(s.done)
		for {
			s.sample()
			select {
			case <-s.stop:
				s.sample()
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	bad, err := s.c.drained()
	if err != nil {
		// A slurmctld busy with a queue of jobs on a loaded machine may
		// leave one sinfo unanswered ("Socket timed out"): asked again
		// once before the sample counts as failed.
		time.Sleep(500 * time.Millisecond)
		bad, err = s.c.drained()
	}
	var gpus = map[string][]client.GPU{}
	// The quotas of the live sessions, added up per GPU here (not the
	// daemon's own committed figure alone).
	limits := map[string]map[string]uint64{}
	for _, n := range s.c.nodes {
		g, gerr := n.gpus()
		if gerr != nil {
			err = gerr
		}
		gpus[n.Name] = g
		ss, serr := n.sessions()
		if serr != nil {
			err = serr
		}
		limits[n.Name] = map[string]uint64{}
		for _, sess := range ss {
			for _, sg := range sess.GPUs {
				limits[n.Name][sg.UUID] += sg.LimitBytes
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if err != nil {
		s.errs = append(s.errs, err.Error())
	}
	if len(bad) > 0 {
		s.drains = append(s.drains, strings.Join(bad, ","))
	}
	for node, gs := range gpus {
		for _, g := range gs {
			if g.CommittedBytes > g.PhysicalBytes || limits[node][g.UUID] > g.PhysicalBytes {
				s.overruns = append(s.overruns, fmt.Sprintf("%s GPU %d: %d bytes committed (sessions' quotas %d) of %d",
					node, g.Index, g.CommittedBytes, limits[node][g.UUID], g.PhysicalBytes))
			}
			if g.Sessions > s.maxShare[node] {
				s.maxShare[node] = g.Sessions
			}
		}
	}
}

// finish stops sampling and fails t on any drain, overrun or sampling error.
func (s *sampler) finish(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.drains) > 0 {
		t.Errorf("nodes drained at %d of %d samples: %v", len(s.drains), s.samples, s.drains[0])
	}
	if len(s.overruns) > 0 {
		t.Errorf("quotas over a GPU's capacity at %d samples: %v", len(s.overruns), s.overruns[0])
	}
	if len(s.errs) > 0 {
		t.Errorf("%d samples failed: %v", len(s.errs), s.errs[0])
	}
	t.Logf("%d samples: no drain, no GPU over capacity; most sessions on one GPU: %v", s.samples, s.maxShare)
}
