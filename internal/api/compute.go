package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Compute is a session's share of GPU time on each of its GPUs
// (docs/compute-share.md). Mode "proportional": the share is the
// session's quota over the GPU's memory; "percent": Percent of the GPU;
// "off" (or no Compute at all): launches are never gated. Shares are
// work-conserving weights; MaxPercent (0: none) makes the share also a
// ceiling, held when the session is alone.
type Compute struct {
	Mode       string `json:"mode"`
	Percent    int    `json:"percent,omitempty"`
	MaxPercent int    `json:"max_percent,omitempty"`
}

// Compute modes.
const (
	ComputeOff          = "off"
	ComputeProportional = "proportional"
	ComputePercent      = "percent"
)

// Validate says what is wrong with c (nil is valid: no share).
func (c *Compute) Validate() error {
	if c == nil {
		return nil
	}
	switch c.Mode {
	case ComputeOff, ComputeProportional:
		if c.Percent != 0 {
			return fmt.Errorf("%w: compute mode %q takes no percent", ErrBadRequest, c.Mode)
		}
	case ComputePercent:
		if c.Percent < 1 || c.Percent > 100 {
			return fmt.Errorf("%w: compute percent %d (want 1..100)", ErrBadRequest, c.Percent)
		}
	default:
		return fmt.Errorf("%w: compute mode %q (want off, proportional or percent)", ErrBadRequest, c.Mode)
	}
	if c.MaxPercent < 0 || c.MaxPercent > 100 {
		return fmt.Errorf("%w: compute max_percent %d (want 1..100, 0 for none)", ErrBadRequest, c.MaxPercent)
	}
	return nil
}

// Shared reports whether c asks for any gating at all.
func (c *Compute) Shared() bool {
	return c != nil && (c.Mode != ComputeOff || c.MaxPercent > 0)
}

// String is the share as people read it: "25%", "proportional to the
// quota", "25% (at most 30%)", "at most 30%"; "none" for no share.
func (c *Compute) String() string {
	if !c.Shared() {
		return "none"
	}
	switch {
	case c.Mode == ComputeOff:
		return fmt.Sprintf("at most %d%%", c.MaxPercent)
	case c.MaxPercent > 0:
		return fmt.Sprintf("%s (at most %d%%)", c.weight(), c.MaxPercent)
	}
	return c.weight()
}

func (c *Compute) weight() string {
	if c.Mode == ComputePercent {
		return fmt.Sprintf("%d%%", c.Percent)
	}
	return "proportional to the quota"
}

// ParseCompute reads a share as users write it (srun's --gpu-compute and
// --gpu-compute-max, plugstack.conf's compute= and compute_cap=): share a
// percent 1..100, "proportional" or "off" ("" is off); max a percent
// 1..100, or 0 or "" for none. It returns nil, nil when that is no share at all.
func ParseCompute(share, max string) (*Compute, error) {
	share, max = strings.TrimSpace(share), strings.TrimSpace(max)
	c := &Compute{Mode: ComputeOff}
	switch share {
	case "", ComputeOff:
	case ComputeProportional:
		c.Mode = ComputeProportional
	default:
		p, err := strconv.Atoi(strings.TrimSuffix(share, "%"))
		if err != nil {
			return nil, fmt.Errorf("%w: compute share %q (want a percent 1..100, proportional or off)", ErrBadRequest, share)
		}
		c.Mode, c.Percent = ComputePercent, p
	}
	if max != "" {
		p, err := strconv.Atoi(strings.TrimSuffix(max, "%"))
		if err != nil {
			return nil, fmt.Errorf("%w: compute ceiling %q (want a percent 1..100, 0 for none)", ErrBadRequest, max)
		}
		c.MaxPercent = p
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !c.Shared() {
		return nil, nil
	}
	return c, nil
}

// ShareLimit is a bound of the site's compute policy as gpusliced.yaml
// and job_submit.lua write it: "proportional" (the quota's fraction of
// the GPU) or a percent 1..100; the zero value is none.
type ShareLimit struct {
	Proportional bool
	Percent      int
}

// ParseShareLimit reads a bound: "proportional", a percent 1..100 ("50"
// or "50%"), or, when none is true, "" or "none" for no bound.
func ParseShareLimit(s string, none bool) (ShareLimit, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == ComputeProportional:
		return ShareLimit{Proportional: true}, nil
	case none && (s == "" || s == "none"):
		return ShareLimit{}, nil
	}
	p, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || p < 1 || p > 100 {
		if none {
			return ShareLimit{}, fmt.Errorf("%q: want proportional, a percent 1..100 or none", s)
		}
		return ShareLimit{}, fmt.Errorf("%q: want proportional or a percent 1..100", s)
	}
	return ShareLimit{Percent: p}, nil
}

// String is the bound as the configuration writes it.
func (l ShareLimit) String() string {
	switch {
	case l.Proportional:
		return ComputeProportional
	case l.Percent > 0:
		return strconv.Itoa(l.Percent)
	}
	return "none"
}

// of is the bound in percent of a GPU for a quota of fraction f of it;
// +Inf for none.
func (l ShareLimit) of(f float64) float64 {
	switch {
	case l.Proportional:
		return 100 * f
	case l.Percent > 0:
		return float64(l.Percent)
	}
	return math.Inf(1)
}

// spec is the weight the bound gives.
func (l ShareLimit) spec() Compute {
	if l.Proportional {
		return Compute{Mode: ComputeProportional}
	}
	return Compute{Mode: ComputePercent, Percent: l.Percent}
}

// ceiling is the bound as a ceiling in whole percents for a quota of
// fraction f: a proportional one rounded up, and at least 1 (0 is none).
func (l ShareLimit) ceiling(f float64) int {
	if l.Proportional {
		return max(1, min(100, int(math.Ceil(100*f-1e-9))))
	}
	return l.Percent
}

// ComputePolicy is the site's rule for the GPU time shares of Slurm jobs
// (gpusliced.yaml's compute_* keys; job_submit.lua applies the same at
// submit, refusing what this lowers). The Prolog passes what the job
// asked, which its owner controls; gpusliced gives it what the policy
// allows (Apply).
type ComputePolicy struct {
	// Default is the weight of a job that asks for none: Mode
	// proportional, percent or off (never held).
	Default Compute
	// UserShare: a job may ask a weight of its own (--gpu-compute), up to
	// Max. False: every job gets Default.
	UserShare bool
	// Max is the most weight a job may ask (at least Default).
	Max ShareLimit
	// Cap is every job's ceiling (none: no ceiling); a job may ask a
	// lower one (--gpu-compute-max).
	Cap ShareLimit
}

// DefaultComputePolicy: a job's weight is its quota's fraction of the
// GPU unless it asks for less; no ceiling.
func DefaultComputePolicy() ComputePolicy {
	return ComputePolicy{Default: Compute{Mode: ComputeProportional}, UserShare: true,
		Max: ShareLimit{Proportional: true}}
}

// ParseComputeDefault reads a policy's default weight: "proportional", a
// percent 1..100 or "off".
func ParseComputeDefault(s string) (Compute, error) {
	if strings.TrimSpace(s) == ComputeOff {
		return Compute{Mode: ComputeOff}, nil
	}
	l, err := ParseShareLimit(s, false)
	if err != nil {
		return Compute{}, fmt.Errorf("%q: want proportional, a percent 1..100 or off", strings.TrimSpace(s))
	}
	return l.spec(), nil
}

// weightOf is c's weight in percent of a GPU for a quota of fraction f;
// +Inf for off (a session without a weight is never held).
func weightOf(c Compute, f float64) float64 {
	switch c.Mode {
	case ComputePercent:
		return float64(c.Percent)
	case ComputeProportional:
		return 100 * f
	}
	return math.Inf(1)
}

// Apply is the share a job gets for the one it asked (nil: none; the
// Prolog's, from --gpu-compute and --gpu-compute-max) when its quota is
// fraction of the GPU's memory (the smallest over its GPUs, 0..1). A
// weight above the most the policy allows is lowered to it, a ceiling
// above the site's to the site's; lowered lists what was changed, for the
// log (nil when nothing was). An invalid request counts as none asked:
// the Prolog must not fail for it. nil: no share.
func (p ComputePolicy) Apply(asked *Compute, fraction float64) (got *Compute, lowered []string) {
	if asked != nil && asked.Validate() != nil {
		asked = nil
	}
	if fraction <= 0 || fraction > 1 {
		fraction = 1
	}
	out := Compute{Mode: p.Default.Mode, Percent: p.Default.Percent}
	if asked != nil && asked.Mode != ComputeOff {
		most, mostSpec := weightOf(p.Default, fraction), p.Default
		if m := p.Max.of(fraction); m > most {
			most, mostSpec = m, p.Max.spec()
		}
		switch {
		case !p.UserShare:
			lowered = append(lowered, fmt.Sprintf("weight %s: the site sets it", asked.weight()))
		case weightOf(*asked, fraction) > most+1e-9:
			out.Mode, out.Percent = mostSpec.Mode, mostSpec.Percent
			lowered = append(lowered, fmt.Sprintf("weight %s: at most %s (%.3g%%)", asked.weight(), mostSpec.weight(), most))
		default:
			out.Mode, out.Percent = asked.Mode, asked.Percent
		}
	}
	want := 0
	if asked != nil {
		want = asked.MaxPercent
	}
	out.MaxPercent = want
	if c := p.Cap.ceiling(fraction); c > 0 && (want == 0 || want > c) {
		out.MaxPercent = c
		if want > c {
			lowered = append(lowered, fmt.Sprintf("ceiling %d%%: at most %d%%", want, c))
		}
	}
	if !out.Shared() {
		return nil, lowered
	}
	return &out, lowered
}
