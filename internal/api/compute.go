package api

import (
	"fmt"
	"strconv"
	"strings"
)

// Compute is a session's share of GPU time on each of its GPUs
// (docs/daemon.md, "Compute share"). Mode "proportional": the share is the
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
