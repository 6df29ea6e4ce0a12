package cli

import (
	"io"
	"strconv"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/size"
	"github.com/spf13/pflag"
)

const updateLong = `Changes a live session (PATCH /v1/sessions/ID): its quota on every GPU (--gpu-mem, refused
with exit 3 when the GPU cannot hold it), its time to live (--ttl), its GPU time share
(--gpu-compute, --gpu-compute-max; the flags not given keep the session's values). A quota
or share change holds at once for the session's running processes (a share from gpusliced's
next pass, 100 ms). Needs the admin socket.`

// computeFlags are a session's GPU time share as srun takes it.
type computeFlags struct {
	share, max string
}

func (c *computeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.share, "gpu-compute", "", "GPU time share on each GPU: a percent 1..100, proportional (the quota's fraction of the GPU) or off")
	fs.StringVar(&c.max, "gpu-compute-max", "", "ceiling on the session's GPU time, a percent 1..100 (0: none); holds even alone")
}

// spec is the share the flags give, from base (the session's, nil for
// none) for the flags not given; nil is no share.
func (c *computeFlags) spec(fs *pflag.FlagSet, base *api.Compute) (*api.Compute, error) {
	share, max := "", ""
	if base != nil {
		share = base.Mode
		if base.Mode == api.ComputePercent {
			share = strconv.Itoa(base.Percent)
		}
		max = strconv.Itoa(base.MaxPercent)
	}
	if fs.Changed("gpu-compute") {
		share = c.share
	}
	if fs.Changed("gpu-compute-max") {
		max = c.max
	}
	s, err := api.ParseCompute(share, max)
	if err != nil {
		return nil, usagef("--gpu-compute %q --gpu-compute-max %q: %v", share, max, err)
	}
	return s, nil
}

func updateCmd(fs *pflag.FlagSet, e *env) func([]string) error {
	gpuMem := fs.String("gpu-mem", "", "new quota on each of the session's GPUs, e.g. 8G")
	ttl := fs.String("ttl", "", "new time to live from now, e.g. 12h or seconds (0: the daemon's default)")
	var cf computeFlags
	cf.register(fs)
	jsonFlag(fs, e)
	return func(args []string) error {
		id, err := oneID(args)
		if err != nil {
			return err
		}
		var req client.PatchRequest
		if fs.Changed("gpu-mem") {
			b, err := size.Parse(*gpuMem)
			if err != nil || b == 0 {
				return usagef("--gpu-mem %q: a size such as 8G or 512M, more than 0", *gpuMem)
			}
			req.QuotaBytes = &b
		}
		if fs.Changed("ttl") {
			var n int64
			if *ttl != "0" {
				if n, err = parseTTL(*ttl); err != nil {
					return err
				}
			}
			req.TTLSeconds = &n
		}
		c := e.client()
		ctx, cancel := ctxTimeout()
		defer cancel()
		if fs.Changed("gpu-compute") || fs.Changed("gpu-compute-max") {
			cur, err := c.GetSession(ctx, id)
			if err != nil {
				return err
			}
			spec, err := cf.spec(fs, cur.Compute)
			if err != nil {
				return err
			}
			if spec == nil {
				spec = &api.Compute{Mode: api.ComputeOff}
			}
			req.Compute = spec
		}
		if req.QuotaBytes == nil && req.TTLSeconds == nil && req.Compute == nil {
			return usagef("nothing to change: give --gpu-mem, --ttl, --gpu-compute or --gpu-compute-max")
		}
		s, err := c.PatchSession(ctx, id, req)
		if err != nil {
			return err
		}
		return e.show(s, func(w io.Writer) { printSession(w, s) })
	}
}
