// Package api holds the admin API's wire types and error vocabulary
// (docs/api.md), shared by the daemon, internal/client and the CLI.
package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel errors. The daemon wraps them; the HTTP layer maps them to status
// codes (HTTPStatus) and the client maps the codes back (FromCode).
var (
	ErrNotFound      = errors.New("not found")
	ErrConflict      = errors.New("conflict")
	ErrQuotaExceeded = errors.New("quota exceeded")
	ErrBadRequest    = errors.New("bad request")
	ErrUnavailable   = errors.New("gpusliced unavailable")
	ErrInternal      = errors.New("internal error")
)

// Error codes in the JSON error body.
const (
	CodeNotFound      = "not_found"
	CodeConflict      = "conflict"
	CodeQuotaExceeded = "quota_exceeded"
	CodeBadRequest    = "bad_request"
	CodeInternal      = "internal"
)

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Classify maps an error to its HTTP status and code.
func Classify(err error) (int, string) {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict, CodeConflict
	case errors.Is(err, ErrQuotaExceeded):
		return http.StatusInsufficientStorage, CodeQuotaExceeded
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest, CodeBadRequest
	default:
		return http.StatusInternalServerError, CodeInternal
	}
}

// FromCode returns the sentinel for an error body code.
func FromCode(code string) error {
	switch code {
	case CodeNotFound:
		return ErrNotFound
	case CodeConflict:
		return ErrConflict
	case CodeQuotaExceeded:
		return ErrQuotaExceeded
	case CodeBadRequest:
		return ErrBadRequest
	default:
		return ErrInternal
	}
}

// SessionRequest creates a session. QuotaBytes applies to each GPU in GPUs
// (UUIDs or NVML indices as strings; empty = every GPU of the node); Quotas
// sets per-GPU values (keys as in GPUs) and wins for the GPUs it names.
// UID 0 means a root-owned session. TTLSeconds 0 takes the daemon default.
type SessionRequest struct {
	ID         string            `json:"id"`
	UID        uint32            `json:"uid"`
	QuotaBytes uint64            `json:"quota_bytes,omitempty"`
	GPUs       []string          `json:"gpus,omitempty"`
	Quotas     map[string]uint64 `json:"quotas,omitempty"`
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
	Compute    *Compute          `json:"compute,omitempty"` // GPU time share (compute.go)
	// ComputePolicy: Compute is what the job asked (the Prolog's request,
	// from the job's own --gpu-compute / --gpu-compute-max), and gpusliced
	// gives it what the node's compute policy allows (ComputePolicy.Apply:
	// the default when nil, lowered to the most allowed). False: taken as
	// given (root's own request).
	ComputePolicy bool `json:"compute_policy,omitempty"`
	// SLUID is the job's SLUID (Slurm 26.05+, SLURM_JOB_SLUID; sluid.go),
	// given by the Prolog: a process in a root-owned cgroup directory of
	// that name belongs to this session, and the driver's memory limit
	// goes on that directory. Empty: none (Slurm before 26.05).
	SLUID string `json:"sluid,omitempty"`
	// CreatorPID, when set, binds the session to the process that sends
	// the request (gpuslice run), which must be that process's pid: the
	// daemon checks it against the admin socket's peer (SO_PEERCRED).
	// gpusliced releases the session when that process is gone without
	// releasing it, after killing what is left in its run cgroup
	// (gpuslice-run-<id>), and a create that names a live session fails
	// (conflict) unless that session is this process's.
	CreatorPID uint32 `json:"creator_pid,omitempty"`
}

// PatchRequest changes a session's quotas, TTL and/or GPU time share live.
// QuotaBytes sets every GPU of the session; Quotas sets the GPUs it names
// (UUID or index); Compute replaces the share ({"mode": "off"} removes it).
type PatchRequest struct {
	QuotaBytes *uint64           `json:"quota_bytes,omitempty"`
	Quotas     map[string]uint64 `json:"quotas,omitempty"`
	TTLSeconds *int64            `json:"ttl_seconds,omitempty"`
	Compute    *Compute          `json:"compute,omitempty"`
}

// SessionGPU is one GPU of a session.
type SessionGPU struct {
	UUID          string `json:"uuid"`
	Index         int    `json:"index"`
	Name          string `json:"name"`
	PhysicalBytes uint64 `json:"physical_bytes"`
	LimitBytes    uint64 `json:"limit_bytes"`
	UsedBytes     uint64 `json:"used_bytes"`
	PeakBytes     uint64 `json:"peak_bytes"`
	Denied        uint64 `json:"denied"`
	// Enforcement is how the quota is held on this GPU (GPU.Enforcement).
	Enforcement string `json:"enforcement,omitempty"`
}

// Process is one attached process.
type Process struct {
	PID       uint32            `json:"pid"`
	Slot      int               `json:"slot"`
	Attached  time.Time         `json:"attached"`
	UsedBytes map[string]uint64 `json:"used_bytes"`
}

// Session is the session object.
type Session struct {
	ID         string       `json:"id"`
	UID        uint32       `json:"uid"`
	Created    time.Time    `json:"created"`
	Updated    time.Time    `json:"updated"`
	TTLSeconds int64        `json:"ttl_seconds"`
	Expires    time.Time    `json:"expires"`
	GPUs       []SessionGPU `json:"gpus"`
	Processes  []Process    `json:"processes"`
	SLUID      string       `json:"sluid,omitempty"`
	Compute    *Compute     `json:"compute,omitempty"` // its GPU time share; nil: none
}

// ReportGPU is one GPU's final figures.
type ReportGPU struct {
	UUID           string `json:"uuid"`
	LimitBytes     uint64 `json:"limit_bytes"`
	PeakBytes      uint64 `json:"peak_bytes"`
	FinalUsedBytes uint64 `json:"final_used_bytes"`
	Denied         uint64 `json:"denied"`
	ReclaimedBytes uint64 `json:"reclaimed_bytes"`
	// AuditPeakBytes is the most the driver reported the job holding on
	// the GPU (the audit's figure, which the job cannot write).
	AuditPeakBytes uint64 `json:"audit_peak_bytes"`
}

// Report describes a released session (DELETE, history).
type Report struct {
	ID       string      `json:"id"`
	UID      uint32      `json:"uid"`
	Created  time.Time   `json:"created"`
	Released time.Time   `json:"released"`
	Reason   string      `json:"reason,omitempty"` // "deleted", "ttl", "abandoned" (its creator is gone: SessionRequest.CreatorPID)
	GPUs     []ReportGPU `json:"gpus"`
	// Audit lists the overruns the audit found (driver figures above the
	// quota) and what was done about them.
	Audit []string `json:"audit,omitempty"`
	// AuditKilled counts the job's processes the audit killed.
	AuditKilled int `json:"audit_killed,omitempty"`
}

// GPU is one GPU of the node's inventory.
type GPU struct {
	Index          int    `json:"index"`
	UUID           string `json:"uuid"`
	Name           string `json:"name"`
	PhysicalBytes  uint64 `json:"physical_bytes"`
	CommittedBytes uint64 `json:"committed_bytes"`
	UsedBytes      uint64 `json:"used_bytes"`
	Sessions       int    `json:"sessions"`
	// ContextCostBytes is what a CUDA context costs on the GPU as
	// gpusliced's context probe measured it; absent until measured.
	ContextCostBytes *uint64 `json:"context_cost_bytes,omitempty"`
	// Enforcement is how a session's quota is held on this GPU:
	// EnforcementDriver or EnforcementInterceptor.
	Enforcement string `json:"enforcement"`
}

// How a GPU's quotas are enforced (GPU.Enforcement; docs/compute-share.md
// "The driver's own memory limit").
const (
	// EnforcementDriver: the driver holds each job's cgroup to its quota
	// (NVML's memory limits, R615+), under the interceptor and the audit.
	EnforcementDriver = "driver+interceptor"
	// EnforcementInterceptor: the interceptor and the audit alone.
	EnforcementInterceptor = "interceptor"
)

// ContextCostsMeasured is nil when gpusliced has measured what a context
// costs on every GPU of gpus (an inventory), else an error naming the
// first GPU it has not.
func ContextCostsMeasured(gpus []GPU) error {
	for _, g := range gpus {
		if g.ContextCostBytes == nil {
			return fmt.Errorf("GPU %d: context cost not measured yet", g.Index)
		}
	}
	return nil
}

// Health is the /healthz body.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
}

// ValidSessionID reports whether id may name a session: 1..63 characters
// from [A-Za-z0-9._-], not "." or "..".
func ValidSessionID(id string) bool {
	if len(id) < 1 || len(id) > 63 || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// JobEndRequest is the Epilog's one call when a job ends on a node (POST
// /v1/jobs/{id}/end): release the job's session and queue this node's
// record for Slurm's accounting.
type JobEndRequest struct {
	// Node is this node's name (SLURMD_NODENAME); NodeList the job's
	// nodes as Slurm gives them (SLURM_JOB_NODELIST, a compressed
	// hostlist): this node's place in it orders and merges the nodes'
	// records.
	Node     string `json:"node"`
	NodeList string `json:"node_list,omitempty"`
	// NodeCount is the job's node count (SLURM_JOB_NUM_NODES; 0:
	// unknown). Slurm 22.05 gives the Epilog no node list: gpusliced then
	// places the node by the list slurmdbd holds, which must have as many.
	NodeCount int `json:"node_count,omitempty"`
	// QuotaBytes is the job's quota per GPU.
	QuotaBytes uint64 `json:"quota_bytes,omitempty"`
	// Refused: gpusliced refused the job's quota on this node (the
	// Prolog left its refusal line).
	Refused bool   `json:"refused,omitempty"`
	SLUID   string `json:"sluid,omitempty"`
}

// JobEnd answers a JobEndRequest.
type JobEnd struct {
	// Report is the released session's (nil: none was released: no
	// session here, or one still in use, Released says).
	Report   *Report `json:"report,omitempty"`
	Released string  `json:"released,omitempty"` // why no session was released
	// Accounting is "queued" when the record waits for Slurm's
	// accounting, else why nothing was queued.
	Accounting string `json:"accounting"`
}

// AccountingQueued is JobEnd.Accounting when the record was queued.
const AccountingQueued = "queued"
