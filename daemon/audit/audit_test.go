package audit

import (
	"io"
	"log/slog"
	"reflect"
	"testing"
)

// script is a Source returning one prepared read per call.
type script struct {
	reads [][]Sample
	n     int
}

func (s *script) Read() ([]Sample, error) {
	r := s.reads[min(s.n, len(s.reads)-1)]
	s.n++
	return r, nil
}

type table struct {
	owner map[uint32]string
	q     Quotas
}

func (t table) SessionOf(pid uint32) string { return t.owner[pid] }
func (t table) Quotas() Quotas              { return t.q }

// recorder is an Actor that records what it would stop.
type recorder struct{ got []Overrun }

func (r *recorder) Act(o Overrun) []uint32 {
	r.got = append(r.got, o)
	return o.Victims
}

func TestLoopPass(t *testing.T) {
	jobs := table{owner: map[uint32]string{1: "a", 2: "a", 3: "b"},
		q: Quotas{"a": {0: 100}, "b": {0: 100}}}
	tests := []struct {
		name  string
		reads [][]Sample
		want  []Overrun
	}{
		{"within quota: one read, nothing done", [][]Sample{{{1, 0, 60}, {2, 0, 40}, {3, 0, 100}}}, nil},
		{"a real overrun is in both reads", [][]Sample{{{1, 0, 80}, {2, 0, 40}}, {{1, 0, 80}, {2, 0, 40}}},
			[]Overrun{{Session: "a", GPU: 0, Limit: 100, Used: 120, Victims: []uint32{1}, Freed: 80}}},
		{"two reads of moving memory never add up to an overrun",
			// pid 1 frees 60 while pid 2 allocates 60: each read caught one
			// side at a different instant.
			[][]Sample{{{1, 0, 60}, {2, 0, 60}}, {{1, 0, 0}, {2, 0, 60}}}, nil},
		{"a process gone by the second read is not stopped", [][]Sample{{{1, 0, 200}, {3, 0, 1}}, {{3, 0, 1}}}, nil},
		{"unknown pids are never stopped", [][]Sample{{{9, 0, 1 << 40}}, {{9, 0, 1 << 40}}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			var seen [][]Overrun
			l := &Loop{Source: &script{reads: tc.reads}, Jobs: jobs, Actor: rec,
				Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
				Events: Events{Overrun: func(o Overrun, stopped []uint32) { seen = append(seen, []Overrun{o}) }}}
			if err := l.Pass(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rec.got, tc.want) {
				t.Fatalf("acted on %+v, want %+v", rec.got, tc.want)
			}
			if len(seen) != len(tc.want) {
				t.Fatalf("%d overrun events, want %d", len(seen), len(tc.want))
			}
		})
	}
}

// driverLog is a Driver that records its calls; Charge reports growth
// while grow says so.
type driverLog struct {
	calls []string
	seen  [][]Attributed
	grow  []bool
}

func (d *driverLog) Mark() { d.calls = append(d.calls, "mark") }
func (d *driverLog) Charge(u []Attributed) bool {
	d.calls = append(d.calls, "charge")
	d.seen = append(d.seen, u)
	g := len(d.grow) > 0 && d.grow[0]
	if len(d.grow) > 0 {
		d.grow = d.grow[1:]
	}
	return g
}
func (d *driverLog) Begin()  { d.calls = append(d.calls, "begin") }
func (d *driverLog) Settle() { d.calls = append(d.calls, "settle") }

// Every read goes to the Driver between a Mark and a Charge; a read that
// shows driver memory growing is confirmed by a second one in the same
// pass; the pass begins with Begin and ends with Settle.
func TestLoopDriver(t *testing.T) {
	jobs := table{owner: map[uint32]string{1: "a"}, q: Quotas{"a": {0: 100}}}
	for _, tc := range []struct {
		name string
		grow []bool
		want []string
	}{
		{"steady: one read", []bool{false}, []string{"begin", "mark", "charge", "settle"}},
		{"growth: a confirming read", []bool{true, false}, []string{"begin", "mark", "charge", "mark", "charge", "settle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &driverLog{grow: tc.grow}
			l := &Loop{Source: &script{reads: [][]Sample{{{1, 0, 50}}}}, Jobs: jobs, Actor: &recorder{}, Driver: d,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if err := l.Pass(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.calls, tc.want) {
				t.Fatalf("calls %v, want %v", d.calls, tc.want)
			}
			if want := []Attributed{{Sample{1, 0, 50}, "a"}}; !reflect.DeepEqual(d.seen[0], want) {
				t.Fatalf("charged %+v, want %+v", d.seen[0], want)
			}
		})
	}
}
