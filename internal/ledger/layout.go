// Package ledger is the Go side of a session's shared-memory ledger: the
// limits file (written by the daemon, mapped read-only by clients) and the
// counters file (per-GPU used/peak/denied/reclaimed plus one slot per
// attached process). The byte layout mirrors native/include/gpuslice_ledger.h
// and docs/ledger.md; layout_test.go compiles the C header and compares every
// offset.
package ledger

// Layout constants; keep in step with native/include/gpuslice_ledger.h.
const (
	Version       = 3
	LimitsMagic   = 0x4D4C5347 // "GSLM"
	CountersMagic = 0x54435347 // "GSCT"
	MaxGPUs       = 16
	UUIDLen       = 48
	SessionLen    = 64
	DefaultSlots  = 4096
	MaxSlots      = 65536

	LimitsSize      = 4096
	CountersHdrSize = 4096
	SlotSize        = 3136
	SlotStripes     = 9 // SlotOwned owned by one thread each + the shared one
	SlotOwned       = 8
	SlotShared      = 8 // index of the shared stripe

	SlotFree       = 0
	SlotAttached   = 1
	SlotReclaiming = 2
)

// Limits file offsets.
const (
	LimOffMagic      = 0
	LimOffVersion    = 4
	LimOffNGPUs      = 8
	LimOffFlags      = 12
	LimOffGeneration = 16
	LimOffSession    = 64
	LimOffGPU        = 128 // first struct gs_limit_gpu
	LimGPUStride     = 64
	LimGPUOffUUID    = 0
	LimGPUOffLimit   = 48
	LimGPUOffPhys    = 56
	LimStructSize    = 1152 // sizeof(struct gs_limits)
)

// Counters file offsets.
const (
	CtrOffMagic        = 0
	CtrOffVersion      = 4
	CtrOffNGPUs        = 8
	CtrOffNSlots       = 12
	CtrOffSlotHWM      = 16    // slots [0, hwm) have been claimed at least once (a hint for clients)
	CtrOffGPU          = 64    // first struct gs_counter_gpu
	CtrOffCreditMap    = 2048  // bit i: slot i's threads may keep credit (clients set, the daemon clears at free)
	CreditMapSlots     = 16384 // slots the credit map covers
	CtrGPUStride       = 64
	CtrGPUOffUsed      = 0
	CtrGPUOffPeak      = 8
	CtrGPUOffDenied    = 16
	CtrGPUOffReclaimed = 24
	CtrGPUOffCtxCost   = 32   // a context's cost + 1 as first measured by a process of the session (0: none yet)
	CtrGPUOffDriver    = 40   // driver memory the daemon charged on the slots' shared stripes
	CtrGPUOffSettled   = 48   // audit passes that read the session's processes
	CtrHdrStructSize   = 1088 // sizeof(struct gs_counters_hdr)

	SlotOffPID       = 0
	SlotOffState     = 4
	SlotOffStartTime = 8
	SlotOffAttachNS  = 16
	SlotOffOwned     = 24  // bit k: owned stripe k has an owner (the interceptor's credit scans)
	SlotOffStripe    = 256 // first struct gs_slot_stripe
	SlotStripeStride = 320
	StripeOffBusy    = 0
	StripeOffOwner   = 4
	StripeOffRevoke  = 8
	StripeOffRaised  = 16 // bytes ever added to the stripe's held, every GPU (wrapping)
	StripeOffHeld    = 64
	StripeOffLease   = 192
)

// CountersSize is the size of a counters file with nslots slots.
func CountersSize(nslots int) int { return CountersHdrSize + nslots*SlotSize }
