package audit

import (
	"reflect"
	"testing"
)

const MiB = 1 << 20

func at(session string, pid uint32, gpu int, bytes uint64) Attributed {
	return Attributed{Sample: Sample{PID: pid, GPU: gpu, Bytes: bytes}, Session: session}
}

func TestDecide(t *testing.T) {
	q := Quotas{
		"a": {0: 256 * MiB},
		"b": {0: 1024 * MiB, 1: 512 * MiB},
	}
	tests := []struct {
		name  string
		usage []Attributed
		want  []Overrun
	}{
		{"nothing", nil, nil},
		{"within quota", []Attributed{at("a", 1, 0, 100*MiB), at("a", 2, 0, 156*MiB)}, nil},
		{"exactly the quota", []Attributed{at("a", 1, 0, 256*MiB)}, nil},
		{"one byte over: the largest goes", []Attributed{at("a", 1, 0, 100*MiB), at("a", 2, 0, 156*MiB+1)},
			[]Overrun{{Session: "a", GPU: 0, Limit: 256 * MiB, Used: 256*MiB + 1, Victims: []uint32{2}, Freed: 156*MiB + 1}}},
		{"largest first until it fits", []Attributed{at("a", 1, 0, 200*MiB), at("a", 2, 0, 300*MiB), at("a", 3, 0, 10*MiB)},
			[]Overrun{{Session: "a", GPU: 0, Limit: 256 * MiB, Used: 510 * MiB, Victims: []uint32{2}, Freed: 300 * MiB}}},
		{"two victims", []Attributed{at("a", 1, 0, 200*MiB), at("a", 2, 0, 200*MiB), at("a", 3, 0, 200*MiB)},
			[]Overrun{{Session: "a", GPU: 0, Limit: 256 * MiB, Used: 600 * MiB, Victims: []uint32{1, 2}, Freed: 400 * MiB}}},
		{"GPU without a quota", []Attributed{at("a", 1, 1, 1*MiB)},
			[]Overrun{{Session: "a", GPU: 1, Limit: 0, Used: MiB, Victims: []uint32{1}, Freed: MiB}}},
		{"per GPU, not summed over GPUs", []Attributed{at("b", 1, 0, 1000*MiB), at("b", 1, 1, 500*MiB)}, nil},
		{"other sessions and unknown pids do not count", []Attributed{at("a", 1, 0, 200*MiB), at("b", 2, 0, 900*MiB), at("", 3, 0, 80000*MiB)}, nil},
		{"session unknown to the quotas holds nothing", []Attributed{at("gone", 9, 0, MiB)},
			[]Overrun{{Session: "gone", GPU: 0, Limit: 0, Used: MiB, Victims: []uint32{9}, Freed: MiB}}},
		{"zero-byte processes ignored", []Attributed{at("a", 1, 0, 0), at("a", 2, 0, 256*MiB)}, nil},
		{"sorted by session and GPU", []Attributed{at("b", 5, 1, 600*MiB), at("a", 1, 0, 300*MiB)},
			[]Overrun{
				{Session: "a", GPU: 0, Limit: 256 * MiB, Used: 300 * MiB, Victims: []uint32{1}, Freed: 300 * MiB},
				{Session: "b", GPU: 1, Limit: 512 * MiB, Used: 600 * MiB, Victims: []uint32{5}, Freed: 600 * MiB},
			}},
		{"overflowing sums saturate", []Attributed{at("a", 1, 0, ^uint64(0)), at("a", 2, 0, 5)},
			[]Overrun{{Session: "a", GPU: 0, Limit: 256 * MiB, Used: ^uint64(0), Victims: []uint32{1}, Freed: ^uint64(0)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(q, tc.usage)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Decide = %+v\nwant      %+v", got, tc.want)
			}
		})
	}
}

func TestSteady(t *testing.T) {
	a := []Sample{{1, 0, 100}, {2, 0, 50}, {3, 0, 70}}
	b := []Sample{{1, 0, 80}, {2, 0, 90}, {4, 0, 10}}
	want := []Sample{{1, 0, 80}, {2, 0, 50}}
	if got := Steady(a, b); !reflect.DeepEqual(got, want) {
		t.Fatalf("Steady = %+v, want %+v", got, want)
	}
}
