"""A quota smaller than a CUDA context is refused cleanly at
initialisation: taking the primary context returns
CUDA_ERROR_OUT_OF_MEMORY, the process goes on and exits normally, nothing
stays charged. Without the interceptor the same program gets its context."""

from harness import MiB, OOM

NAME = "context_over_quota_refused"
PROVES = "a quota smaller than a context fails cleanly at init (out of memory, no crash, nothing left charged)"
ORDER = 11
TIMEOUT = 60


def run(h, c):
    ctx = h.ctx_cost()
    steps = ["dev:0", "alloc:1M", "meminfo"]
    rc, p, _ = h.run_probe(steps, h.env(), "bare")
    c.expect(rc == 0 and p.last("dev").get("rc") == "0" and p.last("alloc").get("rc") == "0",
             "without the interceptor the context and 1 MiB were not allocated: %s" % p.tail())
    quota = max(ctx // 2, 16 * MiB)
    c.fig("quota_bytes", quota)
    c.fig("context_bytes", ctx)
    with h.session(quota) as s:
        rc, p, _ = h.run_probe(steps, s.env, "with")
        dev = p.last("dev")
        c.fig("dev_rc", dev.get("rc"))
        c.fig("alloc_rc", p.last("alloc").get("rc"))
        c.fig("exit", p.status())
        c.expect(rc == 0, "the process did not exit normally: %s; %s" % (p.status(), p.tail()))
        c.expect(dev.get("rc") == str(OOM), "taking the context under a %d MiB quota: rc %s, want %d (out of memory)" % (
            quota // MiB, dev.get("rc"), OOM))
        c.expect(p.last("alloc").get("rc") != "0", "an allocation succeeded without a context under the quota")
        used, secs = s.wait_used(lambda u: u == 0, 10)
        c.expect(secs is not None, "%d bytes still charged after the refused process exited" % used)
        c.fig("denied", s.gpu()["denied"])
