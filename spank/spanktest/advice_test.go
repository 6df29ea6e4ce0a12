package spanktest

import (
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/advice"
)

var kinds = []string{"none", "lower", "more"}

// The plugin's end-of-step advice (spank/advice.c) against the table
// internal/advice is checked against.
func TestAdviseTable(t *testing.T) {
	const mib = uint64(1) << 20
	b, err := os.ReadFile("../../internal/advice/testdata/advice.txt")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 5 {
			t.Fatalf("bad row %q", l)
		}
		var n [4]uint64
		for i, j := range []int{0, 1, 2, 4} {
			if n[i], err = strconv.ParseUint(f[j], 10, 64); err != nil {
				t.Fatalf("bad row %q", l)
			}
		}
		k, ask := Advise(n[0]*mib, n[1]*mib, n[2])
		if kinds[k] != f[3] || ask != n[3]*mib {
			t.Errorf("gs_advise(%s MiB, %s MiB, %s) = %s %d MiB, want %s %s MiB", f[0], f[1], f[2], kinds[k], ask/mib, f[3], f[4])
		}
		rows++
	}
	if rows == 0 {
		t.Fatal("the table is empty")
	}
}

// The C and the Go rule agree everywhere, not only on the table.
func TestAdviseAgreesWithGo(t *testing.T) {
	r := rand.New(rand.NewSource(54))
	edges := []uint64{0, 1, 1 << 20, 1 << 30, 1<<64 - 1, 1<<64 - 1<<30}
	pick := func() uint64 {
		switch r.Intn(3) {
		case 0:
			return edges[r.Intn(len(edges))]
		case 1:
			return uint64(r.Int63n(200 << 30))
		default:
			return r.Uint64()
		}
	}
	for i := 0; i < 200000; i++ {
		peak, quota, refused := pick(), pick(), uint64(r.Intn(3))
		ck, cask := Advise(peak, quota, refused)
		gk, gask := advice.Advise(peak, quota, refused)
		if ck != int(gk) || cask != gask {
			t.Fatalf("peak %d quota %d refused %d: C says %s %d, Go %s %d", peak, quota, refused, kinds[ck], cask, gk, gask)
		}
		if cask != 0 && Ask(cask) != advice.Ask(cask) {
			t.Fatalf("%d bytes: C writes %q, Go %q", cask, Ask(cask), advice.Ask(cask))
		}
	}
}
