package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gpuslice/gpuslice/daemon/config"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
)

var slurmConfigCommand = command{"slurm-config", "[flags]", "print this node's gres.conf and slurm.conf Gres= lines",
	"Prints, from the GPUs gpusliced sees, the lines Slurm needs to schedule GPU memory on this node:\n" +
		"gres/gpu and gres/shard with one shard per MiB of each GPU (times gpusliced's overcommit),\n" +
		"as the shipped job_submit.lua expects (docs/slurm.md). --print node gives the slurm.conf\n" +
		"NodeName line's Gres= part, --print gres the gres.conf lines (prefixed with NodeName= so the\n" +
		"output of every node can be concatenated into one shared gres.conf), --print billing the\n" +
		"TRESBillingWeights= of a partition of nodes like this one: jobs bill GiB of GPU memory, a\n" +
		"share by its quota and a whole GPU by its size (docs/monitoring.md).", slurmConfigCmd}

// ShardWeight is a shard's billing weight: a shard is a MiB of GPU memory
// and jobs bill GiB (docs/monitoring.md).
const ShardWeight = 1.0 / 1024

// AccountingLines are the slurm.conf lines (the same on every host) that
// record GPU memory in Slurm's accounting and make fair-share count it
// (docs/monitoring.md); TRESBillingWeights goes on each partition.
var AccountingLines = []string{
	"AccountingStorageTRES=gres/gpu,gres/shard",
	"PriorityType=priority/multifactor",
	"PriorityWeightFairshare=10000",
}

// FeatureDriverLimit is the node feature slurm-config gives a node whose
// every GPU has the driver's own memory limit (enforcement
// driver+interceptor): a job can ask for such a node with
// --constraint=gpuslice_driver_limit.
const FeatureDriverLimit = "gpuslice_driver_limit"

// SlurmLines are one node's Slurm configuration lines.
type SlurmLines struct {
	// Node is the slurm.conf NodeName line (Gres=, and Features= when
	// every GPU has the driver's memory limit).
	Node string
	// Gres are the gres.conf lines.
	Gres []string
	// Notes are comments (e.g. GPUs of different sizes on one node).
	Notes []string
	// Devices are the device files the gres.conf lines name, one per GPU.
	Devices []string
	// Billing is the TRESBillingWeights= of a partition of such nodes:
	// GRES/gpu weighs a GPU's GiB, GRES/shard ShardWeight.
	Billing string
}

// SlurmConfigLines computes a node's lines. deviceFormat names GPU i's
// device file (a Printf format with one %d, e.g. /dev/nvidia%d).
func SlurmConfigLines(node string, gpus []client.GPU, overcommit float64, deviceFormat string) (SlurmLines, error) {
	var out SlurmLines
	if node == "" || strings.ContainsAny(node, " \t=,") {
		return out, usagef("--node %q: expected a Slurm node name", node)
	}
	if overcommit <= 0 {
		return out, usagef("--overcommit %v: must be > 0", overcommit)
	}
	if strings.Count(deviceFormat, "%d") != 1 || strings.Count(deviceFormat, "%") != 1 {
		return out, usagef("--device-format %q: expected one %%d, e.g. /dev/nvidia%%d", deviceFormat)
	}
	if len(gpus) == 0 {
		return out, fmt.Errorf("gpusliced reports no GPU on this node: nothing to schedule")
	}
	var total, physical uint64
	sizes := map[uint64]bool{}
	driver := 0
	for _, g := range gpus {
		shards := uint64(math.Floor(float64(g.PhysicalBytes) * overcommit / float64(1<<20)))
		if shards == 0 {
			return out, fmt.Errorf("GPU %d (%s) has less than 1 MiB of memory", g.Index, g.UUID)
		}
		total += shards
		physical += g.PhysicalBytes
		sizes[shards] = true
		dev := fmt.Sprintf(deviceFormat, g.Index)
		out.Devices = append(out.Devices, dev)
		out.Gres = append(out.Gres, fmt.Sprintf("NodeName=%s Name=gpu File=%s", node, dev))
		out.Gres = append(out.Gres, fmt.Sprintf("NodeName=%s Name=shard Count=%d File=%s", node, shards, dev))
		enf := g.Enforcement
		if enf == "" {
			enf = api.EnforcementInterceptor // a gpusliced from before enforcement was reported
		}
		if enf == api.EnforcementDriver {
			driver++
		}
		out.Notes = append(out.Notes, fmt.Sprintf("GPU %d %s %s: %s, %d shards of 1 MiB, enforced by %s", g.Index, g.UUID, g.Name,
			size.Format(g.PhysicalBytes), shards, enf))
	}
	if len(sizes) > 1 {
		out.Notes = append(out.Notes, "GPUs of different sizes on one node: job_submit.lua takes the average per GPU "+
			"as this node's GPU size when it checks --gpu-mem at submission")
	}
	out.Node = fmt.Sprintf("NodeName=%s Gres=gpu:%d,shard:%d", node, len(gpus), total)
	gib := float64(physical) / float64(len(gpus)) / (1 << 30)
	out.Billing = "TRESBillingWeights=GRES/gpu=" + strconv.FormatFloat(gib, 'f', -1, 64) +
		",GRES/shard=" + strconv.FormatFloat(ShardWeight, 'f', -1, 64)
	if len(sizes) > 1 {
		out.Notes = append(out.Notes, "GPUs of different sizes on one node: TRESBillingWeights bills a whole GPU "+
			"at their average size")
	}
	switch {
	case driver == len(gpus):
		out.Node += " Features=" + FeatureDriverLimit
		out.Notes = append(out.Notes, "every GPU has the driver's own memory limit: Features="+FeatureDriverLimit+
			" (add it to the node's other features) lets jobs ask for it with --constraint="+FeatureDriverLimit)
	case driver > 0:
		out.Notes = append(out.Notes, fmt.Sprintf("%d of %d GPUs have the driver's own memory limit: no %s feature (it means every GPU)",
			driver, len(gpus), FeatureDriverLimit))
	}
	return out, nil
}

func slurmConfigCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	node := fs.String("node", host, "Slurm NodeName of this node")
	overcommit := fs.Float64("overcommit", 0, "shards per MiB of GPU memory (default: gpusliced's overcommit from its configuration)")
	configFile := fs.String("config", "", "gpusliced configuration file read for overcommit (default "+config.DefaultFile+" if it exists)")
	devFmt := fs.String("device-format", "/dev/nvidia%d", "device file of GPU N (gres.conf File=)")
	print := fs.String("print", "all", "what to print: all (commented), node (the slurm.conf NodeName line), gres (gres.conf lines) "+
		"or billing (a partition's TRESBillingWeights=)")
	return func(args []string) error {
		if len(args) != 0 {
			return usagef("slurm-config takes no arguments")
		}
		if *print != "all" && *print != "node" && *print != "gres" && *print != "billing" {
			return usagef("--print %q: expected all, node, gres or billing", *print)
		}
		oc := *overcommit
		if !fs.Changed("overcommit") {
			cargs := []string{}
			if *configFile != "" {
				cargs = append(cargs, "--config", *configFile)
			}
			dc, err := config.Load(cargs, io.Discard)
			if err != nil {
				return fmt.Errorf("gpusliced configuration (for overcommit; or pass --overcommit): %w", err)
			}
			oc = dc.Overcommit
		}
		ctx, cancel := ctxTimeout()
		defer cancel()
		gpus, err := e.client().GPUs(ctx)
		if err != nil {
			return err
		}
		l, err := SlurmConfigLines(*node, gpus, oc, *devFmt)
		if err != nil {
			return err
		}
		if *print == "all" || *print == "gres" {
			for _, w := range DeviceWarnings(l.Devices) {
				fmt.Fprintf(e.stderr, "gpuslice slurm-config: warning: %s\n", w)
			}
		}
		w := e.stdout
		switch *print {
		case "node":
			fmt.Fprintln(w, l.Node)
		case "gres":
			fmt.Fprintln(w, strings.Join(l.Gres, "\n"))
		case "billing":
			fmt.Fprintln(w, l.Billing)
		default:
			fmt.Fprintf(w, "# gpuslice slurm-config: node %s, overcommit %g (one shard = 1 MiB of GPU memory)\n", *node, oc)
			for _, n := range l.Notes {
				fmt.Fprintf(w, "#   %s\n", n)
			}
			fmt.Fprintf(w, "# slurm.conf (same on every host): GresTypes=gpu,shard, JobSubmitPlugins=lua, and this\n"+
				"# node's line gets Gres= (keep its other fields):\n%s\n", l.Node)
			fmt.Fprintf(w, "# gres.conf (on this node, or all nodes' lines in one shared file):\n%s\n", strings.Join(l.Gres, "\n"))
			fmt.Fprintf(w, "# Accounting and fair-share by GPU memory (docs/monitoring.md), slurm.conf on every host:\n#   %s\n"+
				"# and on the PartitionName line of a partition of nodes like this one (a job bills the GiB of\n"+
				"# GPU memory it holds: its quota, or the whole GPU's size):\n#   %s\n",
				strings.Join(AccountingLines, "\n#   "), l.Billing)
		}
		return nil
	}
}

// DeviceWarnings checks the device files gres.conf will name on this node:
// slurmd stops at start ("fatal: can't stat gres.conf file ...") when one
// is missing, and GPU GRES need character devices. It returns one line per
// bad file, then one saying what to do; nil when all are character devices.
func DeviceWarnings(devices []string) []string {
	var out []string
	for _, dev := range devices {
		st, err := os.Stat(dev)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, dev+" does not exist")
		case err != nil:
			out = append(out, fmt.Sprintf("%s: %v", dev, err))
		case st.Mode()&fs.ModeCharDevice == 0:
			out = append(out, fmt.Sprintf("%s is not a character device (%s)", dev, fileKind(st.Mode())))
		}
	}
	if len(out) > 0 {
		out = append(out, "slurmd does not start with such a File= in gres.conf; on a node without GPUs create "+
			"stand-in character devices (mknod DIR/nvidiaN c 195 N) and pass --device-format DIR/nvidia%d "+
			"(docs/install.md \"Without a GPU\")")
	}
	return out
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0:
		return "a block device"
	default:
		return "mode " + m.Type().String()
	}
}
