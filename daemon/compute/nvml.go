package compute

/*
// nvmlProcessUtilizationSample_t and the calls NVMLBusy takes from the
// NVML library with dlsym (nvml.h).
typedef struct {
	unsigned int pid;
	unsigned long long timeStamp;
	unsigned int smUtil, memUtil, encUtil, decUtil;
} gs_util_sample;
typedef int (*gs_util_fn)(void *dev, gs_util_sample *s, unsigned int *n, unsigned long long since);
typedef int (*gs_by_index_fn)(unsigned int, void **);

static int gs_util(void *f, void *dev, gs_util_sample *s, unsigned int *n, unsigned long long since)
{
	return ((gs_util_fn)f)(dev, s, n, since);
}
static int gs_by_index(void *f, unsigned int i, void **dev) { return ((gs_by_index_fn)f)(i, dev); }
*/
import "C"

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

	nvmlgpu "github.com/gpuslice/gpuslice/daemon/gpu"
)

// NVML return codes nvmlDeviceGetProcessUtilization answers (nvml.h).
const (
	nvmlSuccess          = 0
	nvmlNotFound         = 6
	nvmlInsufficientSize = 7
)

// maxSamples bounds the buffer one read may grow to: 64 processes with a
// few seconds of samples each.
const maxSamples = 1 << 14

// NVMLBusy measures GPU time per process from the driver:
// nvmlDeviceGetProcessUtilization's samples (each a process's percent of
// one sample period) since the last read.
//
// The call is taken from the library with dlsym and given a buffer of
// its own, grown while the driver answers INSUFFICIENT_SIZE. go-nvml's
// wrapper sizes its buffer from a first call with none, and NVIDIA's
// driver answers that call with a fixed count (100) whatever the samples
// are (go-nvml issues 11 and 27): once more samples than that are kept
// since the last one read, as on a GPU that ran for a while before the
// first read, every read was INSUFFICIENT_SIZE, none advanced, and no
// share was ever enforced (an H100 with driver 580: two sessions of 30 and
// 70 % got 50/50).
type NVMLBusy struct {
	lib    *nvmlgpu.NVMLLib
	fn     unsafe.Pointer
	devs   []unsafe.Pointer
	seen   []uint64 // newest sample timestamp read, per GPU (us)
	period []float64
	buf    []C.gs_util_sample
	read   []time.Time // when each GPU's last samples were read (monotonic)
	step   []stepWatch // per GPU: its samples' clock going back (clockstep.go)
	skip   []skipList  // per GPU: stamps from before the clock went back, still kept
	// Period is the sample period assumed until a GPU's samples show
	// theirs (ns).
	Period float64
	// Stepped, when set, is told that GPU gpu's samples' clock went back
	// (the node's clock was stepped): reading goes on from stamp to
	// instead of from (µs).
	Stepped func(gpu int, from, to uint64)
}

// A GPU's sample period is not given by NVML: NVIDIA documents 1/6 s to
// 1 s depending on the product. It is the shortest gap between two
// samples' timestamps seen so far (gaps under minGap are taken as one
// period's samples stamped apart).
const minGap = 10e6

// OpenNVMLBusy loads NVML (libPath, else libnvidia-ml.so.1) for the
// first n GPUs by NVML index (the inventory's order).
func OpenNVMLBusy(libPath string, n int) (*NVMLBusy, error) {
	lib, err := nvmlgpu.LoadNVML(libPath)
	if err != nil {
		return nil, err
	}
	b := &NVMLBusy{lib: lib, fn: lib.Sym("nvmlDeviceGetProcessUtilization"),
		seen: make([]uint64, n), period: make([]float64, n), buf: make([]C.gs_util_sample, 256), Period: 100e6,
		read: make([]time.Time, n), step: make([]stepWatch, n), skip: make([]skipList, n)}
	byIndex := lib.Sym("nvmlDeviceGetHandleByIndex_v2")
	if b.fn == nil || byIndex == nil {
		lib.Close(false)
		return nil, fmt.Errorf("NVML %s has no per-process utilisation (nvmlDeviceGetProcessUtilization)", lib.Where)
	}
	if r, err := lib.Init(); err != nil || r != nvmlSuccess {
		if err == nil {
			err = fmt.Errorf("NVML %s: nvmlInit_v2: %s", lib.Where, lib.ErrorString(r))
		}
		lib.Close(false)
		return nil, err
	}
	for i := 0; i < n; i++ {
		var dev unsafe.Pointer
		if r := C.gs_by_index(byIndex, C.uint(i), &dev); r != nvmlSuccess {
			err := fmt.Errorf("NVML device %d: %s", i, b.errString(r))
			b.Close()
			return nil, err
		}
		b.devs = append(b.devs, dev)
	}
	return b, nil
}

func (b *NVMLBusy) errString(r C.int) string { return b.lib.ErrorString(int(r)) }

// Busy returns, per GPU index, the samples that appeared since the last
// call: GPU time per pid and the span of the GPU's time they cover. A GPU
// with no new samples is left out.
func (b *NVMLBusy) Busy() (map[int]Window, error) {
	out := map[int]Window{}
	for i := range b.devs {
		n, r := b.samples(i, b.seen[i])
		if r == nvmlNotFound {
			b.watchStep(i) // none since the last read; or the clock went back
			continue
		}
		if r == nvmlInsufficientSize { // more than maxSamples: next pass
			continue
		}
		if r != nvmlSuccess {
			return nil, fmt.Errorf("NVML device %d process utilisation: %s", i, b.errString(r))
		}
		b.step[i] = stepWatch{}
		pct := map[uint32]float64{} // percent of a sample period, summed per pid
		stamps := make([]uint64, 0, 8)
		for _, s := range b.buf[:n] {
			if ts := uint64(s.timeStamp); ts > b.seen[i] && !b.before(i, ts) {
				stamps = append(stamps, ts)
				pct[uint32(s.pid)] += float64(s.smUtil)
			}
		}
		if len(stamps) == 0 {
			continue
		}
		slices.Sort(stamps)
		stamps = slices.Compact(stamps)
		prev := b.seen[i]
		for _, ts := range stamps {
			if gap := float64(ts-prev) * 1e3; prev > 0 && gap >= minGap && (b.period[i] == 0 || gap < b.period[i]) {
				b.period[i] = gap
			}
			prev = ts
		}
		period := b.period[i]
		if period == 0 {
			period = b.Period
		}
		w := Window{Procs: map[uint32]float64{}, Span: float64(len(stamps)) * period} // the first read: no earlier stamp
		now := time.Now()
		if b.seen[i] > 0 {
			w.Span = float64(stamps[len(stamps)-1]-b.seen[i]) * 1e3
			// The clock stepped forward since the last read: the samples
			// cover no more than the time since (and a period's stamp).
			if since := float64(now.Sub(b.read[i]).Nanoseconds()) + 2*period; w.Span > since {
				w.Span = since
			}
		}
		b.read[i] = now
		for pid, p := range pct {
			w.Procs[pid] = p / 100 * period
		}
		b.seen[i] = stamps[len(stamps)-1]
		out[i] = w
	}
	return out, nil
}

// samples reads GPU i's samples newer than since into b.buf, growing it
// while the driver answers INSUFFICIENT_SIZE (up to maxSamples): how many
// there are in b.buf, and the driver's answer.
func (b *NVMLBusy) samples(i int, since uint64) (int, C.int) {
	for {
		n := C.uint(len(b.buf))
		r := C.gs_util(b.fn, b.devs[i], &b.buf[0], &n, C.ulonglong(since))
		if r != nvmlInsufficientSize || len(b.buf) >= maxSamples {
			return min(int(n), len(b.buf)), r
		}
		b.buf = make([]C.gs_util_sample, min(max(2*len(b.buf), int(n)), maxSamples))
	}
}

// Close unloads NVML.
func (b *NVMLBusy) Close() { b.lib.Close(true) }
