package ledger

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLayoutMatchesCHeader compiles a program against
// native/include/gpuslice_ledger.h that prints every offset and constant,
// and compares them with this package's constants.
func TestLayoutMatchesCHeader(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Fatalf("C compiler %q not found (make deps installs gcc): %v", cc, err)
	}
	hdr, err := filepath.Abs("../../native/include")
	if err != nil {
		t.Fatal(err)
	}
	const prog = `#include <stdio.h>
#include <stddef.h>
#include "gpuslice_ledger.h"
#define P(name, v) printf("%s %llu\n", name, (unsigned long long)(v))
int main(void) {
	P("Version", GS_LEDGER_VERSION);
	P("LimitsMagic", GS_LIMITS_MAGIC);
	P("CountersMagic", GS_COUNTERS_MAGIC);
	P("MaxGPUs", GS_MAX_GPUS);
	P("UUIDLen", GS_UUID_LEN);
	P("SessionLen", GS_SESSION_LEN);
	P("DefaultSlots", GS_DEFAULT_SLOTS);
	P("LimitsSize", GS_LIMITS_SIZE);
	P("CountersHdrSize", GS_COUNTERS_HDR_SIZE);
	P("SlotSize", GS_SLOT_SIZE);
	P("SlotFree", GS_SLOT_FREE);
	P("SlotAttached", GS_SLOT_ATTACHED);
	P("SlotReclaiming", GS_SLOT_RECLAIMING);
	P("LimOffMagic", offsetof(struct gs_limits, magic));
	P("LimOffVersion", offsetof(struct gs_limits, version));
	P("LimOffNGPUs", offsetof(struct gs_limits, ngpus));
	P("LimOffFlags", offsetof(struct gs_limits, flags));
	P("LimOffGeneration", offsetof(struct gs_limits, generation));
	P("LimOffSession", offsetof(struct gs_limits, session));
	P("LimOffGPU", offsetof(struct gs_limits, gpu));
	P("LimGPUStride", sizeof(struct gs_limit_gpu));
	P("LimGPUOffUUID", offsetof(struct gs_limit_gpu, uuid));
	P("LimGPUOffLimit", offsetof(struct gs_limit_gpu, limit));
	P("LimGPUOffPhys", offsetof(struct gs_limit_gpu, physical));
	P("LimStructSize", sizeof(struct gs_limits));
	P("CtrOffMagic", offsetof(struct gs_counters_hdr, magic));
	P("CtrOffVersion", offsetof(struct gs_counters_hdr, version));
	P("CtrOffNGPUs", offsetof(struct gs_counters_hdr, ngpus));
	P("CtrOffNSlots", offsetof(struct gs_counters_hdr, nslots));
	P("CtrOffSlotHWM", offsetof(struct gs_counters_hdr, slot_hwm));
	P("CtrOffGPU", offsetof(struct gs_counters_hdr, gpu));
	P("CtrOffCreditMap", GS_CREDIT_MAP_OFF);
	P("CreditMapSlots", GS_CREDIT_MAP_SLOTS);
	P("CtrGPUStride", sizeof(struct gs_counter_gpu));
	P("CtrGPUOffUsed", offsetof(struct gs_counter_gpu, used));
	P("CtrGPUOffPeak", offsetof(struct gs_counter_gpu, peak));
	P("CtrGPUOffDenied", offsetof(struct gs_counter_gpu, denied));
	P("CtrGPUOffReclaimed", offsetof(struct gs_counter_gpu, reclaimed));
	P("CtrGPUOffCtxCost", offsetof(struct gs_counter_gpu, ctx_cost));
	P("CtrGPUOffDriver", offsetof(struct gs_counter_gpu, driver));
	P("CtrGPUOffSettled", offsetof(struct gs_counter_gpu, settled));
	P("CtrHdrStructSize", sizeof(struct gs_counters_hdr));
	P("SlotOffPID", offsetof(struct gs_slot, pid));
	P("SlotOffState", offsetof(struct gs_slot, state));
	P("SlotOffStartTime", offsetof(struct gs_slot, starttime));
	P("SlotOffAttachNS", offsetof(struct gs_slot, attach_ns));
	P("SlotOffOwned", offsetof(struct gs_slot, owned));
	P("SlotStripes", GS_SLOT_STRIPES);
	P("SlotOffStripe", offsetof(struct gs_slot, stripe));
	P("SlotStripeStride", sizeof(struct gs_slot_stripe));
	P("SlotOwned", GS_SLOT_OWNED);
	P("SlotShared", GS_SLOT_SHARED);
	P("StripeOffBusy", offsetof(struct gs_slot_stripe, busy));
	P("StripeOffOwner", offsetof(struct gs_slot_stripe, owner));
	P("StripeOffRevoke", offsetof(struct gs_slot_stripe, revoke));
	P("StripeOffRaised", offsetof(struct gs_slot_stripe, raised));
	P("StripeOffHeld", offsetof(struct gs_slot_stripe, held));
	P("StripeOffLease", offsetof(struct gs_slot_stripe, lease));
	P("SlotStructSize", sizeof(struct gs_slot));
	P("SlotAt3", (unsigned long long)(size_t)GS_SLOT_AT(0, 3));
	return 0;
}
`
	dir := t.TempDir()
	src := filepath.Join(dir, "layout.c")
	bin := filepath.Join(dir, "layout")
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Werror", "-I", hdr, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compile layout probe: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run layout probe: %v", err)
	}
	got := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("probe line %q: %v", sc.Text(), err)
		}
		got[f[0]] = v
	}
	want := map[string]uint64{
		"Version": Version, "LimitsMagic": LimitsMagic, "CountersMagic": CountersMagic,
		"MaxGPUs": MaxGPUs, "UUIDLen": UUIDLen, "SessionLen": SessionLen, "DefaultSlots": DefaultSlots,
		"LimitsSize": LimitsSize, "CountersHdrSize": CountersHdrSize, "SlotSize": SlotSize,
		"SlotFree": SlotFree, "SlotAttached": SlotAttached, "SlotReclaiming": SlotReclaiming,
		"LimOffMagic": LimOffMagic, "LimOffVersion": LimOffVersion, "LimOffNGPUs": LimOffNGPUs,
		"LimOffFlags": LimOffFlags, "LimOffGeneration": LimOffGeneration, "LimOffSession": LimOffSession,
		"LimOffGPU": LimOffGPU, "LimGPUStride": LimGPUStride, "LimGPUOffUUID": LimGPUOffUUID,
		"LimGPUOffLimit": LimGPUOffLimit, "LimGPUOffPhys": LimGPUOffPhys, "LimStructSize": LimStructSize,
		"CtrOffMagic": CtrOffMagic, "CtrOffVersion": CtrOffVersion, "CtrOffNGPUs": CtrOffNGPUs,
		"CtrOffNSlots": CtrOffNSlots, "CtrOffSlotHWM": CtrOffSlotHWM, "CtrOffGPU": CtrOffGPU, "CtrOffCreditMap": CtrOffCreditMap, "CreditMapSlots": CreditMapSlots, "CtrGPUStride": CtrGPUStride,
		"CtrGPUOffUsed": CtrGPUOffUsed, "CtrGPUOffPeak": CtrGPUOffPeak, "CtrGPUOffDenied": CtrGPUOffDenied,
		"CtrGPUOffReclaimed": CtrGPUOffReclaimed, "CtrGPUOffCtxCost": CtrGPUOffCtxCost,
		"CtrGPUOffDriver": CtrGPUOffDriver, "CtrGPUOffSettled": CtrGPUOffSettled, "CtrHdrStructSize": CtrHdrStructSize,
		"SlotOffPID": SlotOffPID, "SlotOffState": SlotOffState, "SlotOffStartTime": SlotOffStartTime,
		"SlotOffAttachNS": SlotOffAttachNS, "SlotOffOwned": SlotOffOwned, "SlotStripes": SlotStripes, "SlotOffStripe": SlotOffStripe, "SlotStripeStride": SlotStripeStride,
		"SlotOwned": SlotOwned, "SlotShared": SlotShared, "StripeOffBusy": StripeOffBusy, "StripeOffOwner": StripeOffOwner,
		"StripeOffRevoke": StripeOffRevoke, "StripeOffRaised": StripeOffRaised, "StripeOffHeld": StripeOffHeld, "StripeOffLease": StripeOffLease,
		"SlotStructSize": SlotSize,
		"SlotAt3":        CountersHdrSize + 3*SlotSize,
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			g, ok := got[name]
			if !ok {
				t.Fatalf("probe did not print %s", name)
			}
			if g != w {
				t.Fatalf("%s: C header says %d, internal/ledger says %d", name, g, w)
			}
		})
	}
	// The struct must fit in the fixed-size regions.
	if LimStructSize > LimitsSize || CtrHdrStructSize > CountersHdrSize {
		t.Fatalf("header structs overflow their regions")
	}
}
