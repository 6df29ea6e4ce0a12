package api

import "fmt"

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
