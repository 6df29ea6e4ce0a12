package compute

import "time"

// The driver stamps each utilisation sample with the host's wall clock
// (µs), and NVMLBusy reads on from the newest stamp it has seen. When the
// node's clock is stepped back (NTP correcting a clock that ran fast, an
// admin's `date -s`), every sample since is older than that stamp: NVML
// answers NOT_FOUND, and until the clock caught up with it again no
// share was held (the holds stayed as they were: a session of 25 beside
// one of 75 got none of the GPU after a step of 90 s back). gpusliced's
// own timing is Go's monotonic clock, which no step moves; the samples'
// clock is the driver's.
//
// A GPU that answers NOT_FOUND for probeAfter is read whole (since 0)
// at most once per probeAfter. A stamp that was not there at the read
// before, and is no newer than the newest seen, is a sample made since
// on a clock that went back: reading goes on from the newest such stamp.
// The samples of the first probeAfter after the step are not counted;
// the driver only adds samples to what it keeps, so an old sample never
// looks new. The samples from before the step that the driver still
// keeps are newer than that stamp: they are skipped (NVMLBusy.skip) until
// the clock passes them. An idle GPU costs one more NVML call per
// probeAfter.

// probeAfter is how long a GPU answers NOT_FOUND before its samples are
// read whole, and how often they are while it goes on: NVML's sample
// period is 1/6 s to 1 s.
const probeAfter = time.Second

// stepWatch is one GPU's watch for its samples' clock going back.
type stepWatch struct {
	quiet  time.Time           // NOT_FOUND since (zero: the last read had samples)
	probed time.Time           // last read whole
	stamps map[uint64]struct{} // the stamps that read found
}

// watchStep is called when GPU i answered NOT_FOUND.
func (b *NVMLBusy) watchStep(i int) {
	w := &b.step[i]
	now := time.Now()
	if w.quiet.IsZero() {
		w.quiet = now
		return
	}
	if now.Sub(w.quiet) < probeAfter || now.Sub(w.probed) < probeAfter {
		return
	}
	w.probed = now
	n, r := b.samples(i, 0)
	if r != nvmlSuccess {
		w.stamps = nil // none kept (or more than maxSamples): nothing to compare with
		return
	}
	stamps := make(map[uint64]struct{}, n)
	var newest uint64
	for _, s := range b.buf[:n] {
		ts := uint64(s.timeStamp)
		stamps[ts] = struct{}{}
		if _, had := w.stamps[ts]; w.stamps != nil && !had && ts <= b.seen[i] && ts > newest {
			newest = ts
		}
	}
	if newest == 0 {
		w.stamps = stamps
		return
	}
	from := b.seen[i]
	b.skip[i] = skipList{stamps: map[uint64]struct{}{}}
	for ts := range stamps {
		if ts > newest {
			b.skip[i].stamps[ts] = struct{}{}
			b.skip[i].top = max(b.skip[i].top, ts)
		}
	}
	b.seen[i] = newest
	b.read[i] = now
	*w = stepWatch{}
	if b.Stepped != nil {
		b.Stepped(i, from, newest)
	}
}

// before says whether stamp ts of GPU i is of a sample made before its
// clock went back (kept by the driver, newer than where reading goes on):
// counted already. The skip list goes once the clock has passed it.
func (b *NVMLBusy) before(i int, ts uint64) bool {
	if b.skip[i].stamps == nil {
		return false
	}
	if ts > b.skip[i].top {
		b.skip[i] = skipList{} // past every one of them
		return false
	}
	_, old := b.skip[i].stamps[ts]
	return old
}

// skipList is a GPU's stamps from before its clock went back.
type skipList struct {
	stamps map[uint64]struct{}
	top    uint64 // the newest of them
}
