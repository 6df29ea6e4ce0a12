package advice

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Row is one line of testdata/advice.txt, sizes in bytes.
type Row struct {
	Peak, Quota, Refused uint64
	Kind                 string
	Ask                  uint64
}

// Rows reads testdata/advice.txt (path), the table the Go and the C rule
// are both checked against.
func Rows(t testing.TB, path string) []Row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Row
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("%s: bad row %q", path, l)
		}
		var n [4]uint64
		for i, j := range []int{0, 1, 2, 4} {
			if n[i], err = strconv.ParseUint(f[j], 10, 64); err != nil {
				t.Fatalf("%s: bad row %q", path, l)
			}
		}
		out = append(out, Row{Peak: n[0] * mib, Quota: n[1] * mib, Refused: n[2], Kind: f[3], Ask: n[3] * mib})
	}
	return out
}

func TestAdvise(t *testing.T) {
	for _, r := range Rows(t, "testdata/advice.txt") {
		k, ask := Advise(r.Peak, r.Quota, r.Refused)
		if k.String() != r.Kind || ask != r.Ask {
			t.Errorf("Advise(peak %d MiB, quota %d MiB, refused %d) = %s %s, want %s %s",
				r.Peak/mib, r.Quota/mib, r.Refused, k, Ask(ask), r.Kind, Ask(r.Ask))
		}
	}
}

func TestAsk(t *testing.T) {
	for b, want := range map[uint64]string{6 * gib: "6G", 1536 * mib: "1536M", 640 * mib: "640M", 100*gib + 1: "102401M"} {
		if got := Ask(b); got != want {
			t.Errorf("Ask(%d) = %q, want %q", b, got, want)
		}
	}
}
