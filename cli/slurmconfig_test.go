package cli

import (
	"reflect"
	"testing"

	"github.com/gpuslice/gpuslice/internal/client"
)

func TestSlurmConfigLines(t *testing.T) {
	gpus := []client.GPU{
		{Index: 0, UUID: "GPU-a", Name: "A", PhysicalBytes: 16 << 30},
		{Index: 1, UUID: "GPU-b", Name: "A", PhysicalBytes: 16 << 30},
	}
	l, err := SlurmConfigLines("tn1", gpus, 1, "/dev/nvidia%d")
	if err != nil {
		t.Fatal(err)
	}
	if l.Node != "NodeName=tn1 Gres=gpu:2,shard:32768" {
		t.Errorf("node line %q", l.Node)
	}
	want := []string{
		"NodeName=tn1 Name=gpu File=/dev/nvidia0",
		"NodeName=tn1 Name=shard Count=16384 File=/dev/nvidia0",
		"NodeName=tn1 Name=gpu File=/dev/nvidia1",
		"NodeName=tn1 Name=shard Count=16384 File=/dev/nvidia1",
	}
	if !reflect.DeepEqual(l.Gres, want) {
		t.Errorf("gres lines %q, want %q", l.Gres, want)
	}
	// A partition of such nodes bills GiB of GPU memory: a whole GPU its
	// 16, a shard (MiB) 1/1024.
	if l.Billing != "TRESBillingWeights=GRES/gpu=16,GRES/shard=0.0009765625" {
		t.Errorf("billing %q", l.Billing)
	}
	// overcommit scales the shards; a fraction of a MiB is dropped.
	l, err = SlurmConfigLines("n2", []client.GPU{{Index: 0, PhysicalBytes: 80<<30 + 512}}, 1.5, "/x/gpu%d")
	if err != nil || l.Node != "NodeName=n2 Gres=gpu:1,shard:122880" || l.Gres[1] != "NodeName=n2 Name=shard Count=122880 File=/x/gpu0" {
		t.Errorf("overcommit 1.5: %+v %v", l, err)
	}
	// Billing stays by GiB: overcommit gives more shards, not cheaper ones;
	// a whole GPU bills its physical size.
	l, err = SlurmConfigLines("n3", []client.GPU{{Index: 0, PhysicalBytes: 80 << 30}, {Index: 1, PhysicalBytes: 40 << 30}}, 1.5, "/x/gpu%d")
	if err != nil || l.Billing != "TRESBillingWeights=GRES/gpu=60,GRES/shard=0.0009765625" {
		t.Errorf("two sizes, overcommit 1.5: billing %q, %v", l.Billing, err)
	}
	for _, bad := range []struct {
		node, format string
		oc           float64
		gpus         []client.GPU
	}{
		{"", "/dev/nvidia%d", 1, gpus},
		{"a b", "/dev/nvidia%d", 1, gpus},
		{"tn1", "/dev/nvidia", 1, gpus},
		{"tn1", "/dev/%s%d", 1, gpus},
		{"tn1", "/dev/nvidia%d", 0, gpus},
		{"tn1", "/dev/nvidia%d", 1, nil},
	} {
		if _, err := SlurmConfigLines(bad.node, bad.gpus, bad.oc, bad.format); err == nil {
			t.Errorf("SlurmConfigLines(%q, %d GPUs, %v, %q) accepted", bad.node, len(bad.gpus), bad.oc, bad.format)
		}
	}
}

// A node whose every GPU has the driver's own memory limit gets the
// gpuslice_driver_limit feature; a node with some or none does not.
func TestSlurmConfigDriverLimitFeature(t *testing.T) {
	drv := client.GPU{Index: 0, UUID: "GPU-a", PhysicalBytes: 16 << 30, Enforcement: "driver+interceptor"}
	icp := client.GPU{Index: 1, UUID: "GPU-b", PhysicalBytes: 16 << 30, Enforcement: "interceptor"}
	d2 := drv
	d2.Index, d2.UUID = 1, "GPU-c"
	for _, tc := range []struct {
		name string
		gpus []client.GPU
		node string
	}{
		{"all driver", []client.GPU{drv, d2}, "NodeName=n Gres=gpu:2,shard:32768 Features=gpuslice_driver_limit"},
		{"mixed", []client.GPU{drv, icp}, "NodeName=n Gres=gpu:2,shard:32768"},
		{"interceptor only", []client.GPU{icp}, "NodeName=n Gres=gpu:1,shard:16384"},
	} {
		l, err := SlurmConfigLines("n", tc.gpus, 1, "/dev/nvidia%d")
		if err != nil || l.Node != tc.node {
			t.Errorf("%s: node line %q, %v; want %q", tc.name, l.Node, err, tc.node)
		}
	}
}
