package api

import (
	"reflect"
	"strings"
	"testing"
)

// What a job gets for what it asked, under the site's compute policy: the
// default when it asks none, what it asked when that is no more than the
// policy allows, else the most allowed (and why).
func TestComputePolicyApply(t *testing.T) {
	prop := &Compute{Mode: ComputeProportional}
	pct := func(p, max int) *Compute { return &Compute{Mode: ComputePercent, Percent: p, MaxPercent: max} }
	def := DefaultComputePolicy()
	with := func(f func(*ComputePolicy)) ComputePolicy { p := def; f(&p); return p }
	for _, tc := range []struct {
		name     string
		p        ComputePolicy
		asked    *Compute
		fraction float64
		want     *Compute
		lowered  string // "" when nothing was lowered
	}{
		{"nothing asked: the quota's fraction", def, nil, 0.1, prop, ""},
		{"the fraction itself", def, pct(10, 0), 0.1, pct(10, 0), ""},
		{"less", def, pct(4, 0), 0.1, pct(4, 0), ""},
		{"more: lowered to the fraction", def, pct(100, 0), 0.1, prop, "weight 100%: at most proportional to the quota (10%)"},
		{"one point more", def, pct(11, 0), 0.1, prop, "weight 11%"},
		{"proportional asked", def, prop, 0.1, prop, ""},
		{"a ceiling of its own", def, &Compute{Mode: ComputeOff, MaxPercent: 30}, 0.1,
			&Compute{Mode: ComputeProportional, MaxPercent: 30}, ""},
		{"invalid: none asked", def, pct(150, 0), 0.1, prop, ""},
		{"a fixed most", with(func(p *ComputePolicy) { p.Max = ShareLimit{Percent: 50} }), pct(80, 0), 0.1, pct(50, 0), "at most 50%"},
		{"a default above the most", with(func(p *ComputePolicy) { p.Default = Compute{Mode: ComputePercent, Percent: 25} }),
			pct(30, 0), 0.1, pct(25, 0), "at most 25%"},
		{"a default off: nothing to lower", with(func(p *ComputePolicy) { p.Default = Compute{Mode: ComputeOff} }), pct(100, 0), 0.1, pct(100, 0), ""},
		{"a default off, nothing asked: no share", with(func(p *ComputePolicy) { p.Default = Compute{Mode: ComputeOff} }), nil, 0.1, nil, ""},
		{"no share of one's own", with(func(p *ComputePolicy) { p.UserShare = false }), pct(5, 0), 0.1, prop, "the site sets it"},
		{"the site's ceiling", with(func(p *ComputePolicy) { p.Cap = ShareLimit{Percent: 60} }), nil, 0.1,
			&Compute{Mode: ComputeProportional, MaxPercent: 60}, ""},
		{"a ceiling above the site's", with(func(p *ComputePolicy) { p.Cap = ShareLimit{Percent: 60} }), pct(5, 90), 0.1,
			pct(5, 60), "ceiling 90%: at most 60%"},
		{"a lower ceiling", with(func(p *ComputePolicy) { p.Cap = ShareLimit{Percent: 60} }), pct(5, 20), 0.1, pct(5, 20), ""},
		{"a proportional ceiling, rounded up", with(func(p *ComputePolicy) { p.Cap = ShareLimit{Proportional: true} }), nil, 0.105,
			&Compute{Mode: ComputeProportional, MaxPercent: 11}, ""},
		{"a proportional ceiling of a tiny quota", with(func(p *ComputePolicy) { p.Cap = ShareLimit{Proportional: true} }), nil, 0.001,
			&Compute{Mode: ComputeProportional, MaxPercent: 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, lowered := tc.p.Apply(tc.asked, tc.fraction)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("asked %s of a %.1f%% quota: got %s, want %s", tc.asked.String(), 100*tc.fraction, got.String(), tc.want.String())
			}
			why := strings.Join(lowered, "; ")
			if (tc.lowered == "") != (why == "") || !strings.Contains(why, tc.lowered) {
				t.Errorf("asked %s: lowered %q, want %q", tc.asked.String(), why, tc.lowered)
			}
		})
	}
}

func TestParseShareLimit(t *testing.T) {
	for _, tc := range []struct {
		s    string
		none bool
		want ShareLimit
		err  string
	}{
		{"proportional", false, ShareLimit{Proportional: true}, ""},
		{"50", false, ShareLimit{Percent: 50}, ""},
		{"50%", true, ShareLimit{Percent: 50}, ""},
		{"", true, ShareLimit{}, ""},
		{"none", true, ShareLimit{}, ""},
		{"", false, ShareLimit{}, `"": want proportional or a percent 1..100`},
		{"0", true, ShareLimit{}, `"0": want proportional, a percent 1..100 or none`},
		{"101", false, ShareLimit{}, "want proportional or a percent"},
		{"off", false, ShareLimit{}, "want proportional or a percent"},
	} {
		got, err := ParseShareLimit(tc.s, tc.none)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want error %q", tc.s, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.s, got, err, tc.want)
		}
	}
}
