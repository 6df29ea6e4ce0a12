package admincomment

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

const uuidA = "GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b"

func node(name string, i, n int, peak, denied uint64) Node {
	return Node{Name: name, Index: i, Nodes: n, QuotaMiB: 8192,
		GPUs: []GPU{{UUID: uuidA, QuotaMiB: 8192, PeakMiB: peak, Denied: denied}}}
}

func TestMerge(t *testing.T) {
	n0 := node("Node00", 0, 3, 5121, 2)
	n1 := node("node01", 1, 3, 6000, 1)
	n2 := Node{Name: "node02", Index: 2, Nodes: 3, QuotaMiB: 8192, Refused: true}
	both := "gpuslice:v2;quota_mib=8192;nodes=3;reported=0-1;peak_mib=6000;peak_on=node01/" + strings.ToLower(uuidA) + ";denied=3"
	all := "gpuslice:v2;quota_mib=8192;nodes=3;reported=0-2;refused=2;peak_mib=6000;peak_on=node01/" + strings.ToLower(uuidA) + ";denied=3"
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"one node", []Node{n0}, "gpuslice:v2;quota_mib=8192;nodes=3;reported=0;peak_mib=5121;peak_on=node00/" + strings.ToLower(uuidA) + ";denied=2"},
		{"two nodes", []Node{n0, n1}, both},
		{"reordered", []Node{n1, n0}, both},
		{"repeated", []Node{n0, n1, n0, n1, n1}, both},
		{"a refusal", []Node{n2, n1, n0}, all},
		{"every order, repeated", []Node{n2, n0, n2, n1, n0}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ""
			for _, n := range tc.nodes {
				var err error
				if c, err = Merge(c, n, nil); err != nil {
					t.Fatal(err)
				}
			}
			if c != tc.want {
				t.Fatalf("comment %q, want %q", c, tc.want)
			}
			for _, n := range tc.nodes {
				if !Contains(c, n) {
					t.Errorf("Contains(%q, %s) = false", c, n.Name)
				}
			}
		})
	}
	if Contains(both, n2) || Contains("", n0) {
		t.Error("Contains said yes to a node that is not in")
	}
}

// Equal peaks on two GPUs: the same one is named whatever the order.
func TestPeakTie(t *testing.T) {
	a, b := node("n1", 0, 2, 100, 0), node("n2", 1, 2, 100, 0)
	x, _ := Merge("", a, nil)
	x, _ = Merge(x, b, nil)
	y, _ := Merge("", b, nil)
	y, _ = Merge(y, a, nil)
	if x != y || !strings.Contains(x, "peak_on=n1/") {
		t.Fatalf("%q vs %q", x, y)
	}
}

// A job on 256 nodes fits in 1 KiB, whichever nodes have reported and
// refused (alternating is the worst case for ranges), and its summary
// reads back as written.
func TestSize(t *testing.T) {
	const n = 256
	long := strings.Repeat("n", 60) // a long node name in peak_on
	patterns := map[string]func(i int) (in, refused bool){
		"all":              func(int) (bool, bool) { return true, false },
		"every other":      func(i int) (bool, bool) { return i%2 == 0, false },
		"alternate refusd": func(i int) (bool, bool) { return true, i%2 == 1 },
		"every third":      func(i int) (bool, bool) { return i%3 != 0, i%3 == 1 },
	}
	rng := rand.New(rand.NewSource(1))
	patterns["random"] = func(int) (bool, bool) { return rng.Intn(2) == 0, rng.Intn(3) == 0 }
	for name, p := range patterns {
		t.Run(name, func(t *testing.T) {
			var s Summary
			for i := 0; i < n; i++ {
				in, refused := p(i)
				if !in {
					continue
				}
				nd := node(fmt.Sprintf("%s%03d", long, i), i, n, uint64(i), 1)
				if refused {
					nd = Node{Name: nd.Name, Index: i, Nodes: n, QuotaMiB: 8192, Refused: true}
				}
				s.Add(nd)
			}
			c := s.String()
			if len(c) > 1024 {
				t.Fatalf("%d bytes: %s", len(c), c)
			}
			back, kind, err := Parse(c)
			if err != nil || kind != Current || back.String() != c {
				t.Fatalf("read back %q, %v, %v from %q", back.String(), kind, err, c)
			}
			if strings.ContainsAny(c, " '\"ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
				t.Fatalf("not sacctmgr-safe: %q", c)
			}
		})
	}
}

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 5}, "0-2,5"},
		{[]int{0, 2, 4, 6, 8, 10, 12, 14}, "0,2,4,6,8,10,12,14"},
		{evens(100), "x" + strings.Repeat("a", 25)},
		{[]int{255}, "255"},
	} {
		var s Set
		for _, i := range tc.in {
			s.Put(i)
		}
		if got := s.String(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.in, got, tc.want)
		}
		back, err := ParseSet(tc.want)
		if err != nil || back.String() != tc.want || back.Len() != len(tc.in) {
			t.Errorf("ParseSet(%q) = %q, %v", tc.want, back.String(), err)
		}
	}
	for _, bad := range []string{"1-", "3-1", "a", "xg", "-1", "70000"} {
		if _, err := ParseSet(bad); err == nil {
			t.Errorf("ParseSet(%q) accepted", bad)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind Kind
		err  error
	}{
		{"", Empty, nil},
		{"(null)", Empty, nil},
		{"gpuslice:", Empty, nil},
		{"gpuslice:v2;quota_mib=1;nodes=1;reported=0;peak_mib=0;denied=0", Current, nil},
		{"gpuslice:n1/gpu-a=quota_mib:1,peak_mib:1,denied:0;n2/refused=quota_mib:1", Old, nil},
		{"JS1:AbC", Empty, ErrForeign},
		{"gpuslice:x y", Empty, ErrForeign},
		{"gpuslice:v2;quota_mib=1", Empty, ErrMalformed},
		{"gpuslice:v2;quota_mib=1;nodes=1;reported=0;peak_mib=0;denied=0;what=1", Empty, ErrMalformed},
		{"gpuslice:v2;quota_mib=1;nodes=1;nodes=1;reported=0;peak_mib=0;denied=0", Empty, ErrMalformed},
		{"gpuslice:n1/gpu-a=quota_mib:x", Empty, ErrMalformed},
	} {
		_, kind, err := Parse(tc.in)
		if kind != tc.kind || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tc.in, kind, err, tc.kind, tc.err)
		}
	}
	// A site's comment, or one this release cannot read, is never merged
	// into (Merge fails: the caller leaves it alone).
	for _, c := range []string{"JS1:AbC", "gpuslice:v2;garbage"} {
		if got, err := Merge(c, node("n1", 0, 1, 1, 0), nil); err == nil {
			t.Errorf("Merge(%q) = %q", c, got)
		}
	}
}

// A job whose nodes ran both releases during an upgrade: the earlier
// release's entries are carried into the summary, each node once.
func TestMergeOld(t *testing.T) {
	old := "gpuslice:n1/gpu-a=quota_mib:1024,peak_mib:900,denied:1;n1/gpu-b=quota_mib:1024,peak_mib:10,denied:2;n3/refused=quota_mib:1024"
	entries, err := ParseOld(old)
	if err != nil || len(entries) != 3 || entries[0].UUID != "GPU-a" || !entries[2].Refused || entries[1].Denied != 2 {
		t.Fatalf("ParseOld: %+v, %v", entries, err)
	}
	got, err := Merge(old, Node{Name: "n2", Index: 1, Nodes: 3, QuotaMiB: 1024,
		GPUs: []GPU{{UUID: "GPU-c", QuotaMiB: 1024, PeakMiB: 1000, Denied: 4}}}, []string{"n1", "n2", "n3"})
	want := "gpuslice:v2;quota_mib=1024;nodes=3;reported=0-2;refused=2;peak_mib=1000;peak_on=n2/gpu-c;denied=7"
	if err != nil || got != want {
		t.Fatalf("Merge = %q, %v; want %q", got, err, want)
	}
}

func evens(n int) []int {
	var out []int
	for i := 0; i < n; i += 2 {
		out = append(out, i)
	}
	return out
}
