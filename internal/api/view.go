package api

import "time"

// Documents of the IPC VIEW request (docs/protocol.md): what a user may
// read about their own jobs without the admin socket.

// UsageFromLedger names where used, peak and denied figures come from
// today: the session's ledger counters, kept by the interceptor inside the
// job. Quotas (limits) are the daemon's own: the ledger's limits page is
// read-only to the job.
const UsageFromLedger = "ledger"

// JobStatus is a live session as its owner sees it.
type JobStatus struct {
	Session
	// UsageSource says where UsedBytes, PeakBytes and Denied come from.
	UsageSource string `json:"usage_source"`
	// ProcessesOmitted counts processes left out to fit one frame.
	ProcessesOmitted int `json:"processes_omitted,omitempty"`
}

// JobSummary is one live session in a list: its figures, not its processes.
type JobSummary struct {
	ID        string       `json:"id"`
	UID       uint32       `json:"uid"`
	Created   time.Time    `json:"created"`
	Expires   time.Time    `json:"expires"`
	GPUs      []SessionGPU `json:"gpus"`
	Processes int          `json:"processes"`
}

// ViewPage is one page of a list; Next is the offset of the next page, 0
// when this is the last one.
type ViewPage struct {
	Live        []JobSummary `json:"live,omitempty"`
	Finished    []Report     `json:"finished,omitempty"`
	GPUs        []GPU        `json:"gpus,omitempty"`
	UsageSource string       `json:"usage_source,omitempty"`
	Next        uint32       `json:"next,omitempty"`
}
