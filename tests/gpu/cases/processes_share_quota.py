"""Several processes of one session allocating at once never hold more
than the quota together: four processes each take a context, then all
try 16 x 64 MiB at the same time under a quota of four contexts + 1 GiB. The
ledger and the driver's per-process figures (summed) stay within the
quota, and the processes got nearly all of it. Without the interceptor the
same four get everything they ask for (the quota is what stopped them).
Then one is killed with SIGKILL: its bytes come back to the session
(gpusliced sees the exit through a pidfd)."""

import time

from harness import MiB, fmt_bytes

NAME = "processes_share_quota"
PROVES = "processes of one session never exceed the quota together; kill -9 gives a process's bytes back"
ORDER = 50
TIMEOUT = 120

P, K, S = 4, 16, 64 * MiB


def start_all(h, env, label):
    """Each process takes its context and waits; then all allocate at once."""
    steps = ["dev:0", "pause"] + ["alloc:%d" % S] * K + ["held", "pause"]
    procs = [h.probe(steps, env, "%s-%d" % (label, i)) for i in range(P)]
    for p in procs:
        p.until("paused", 60)
    for p in procs:
        p.cont()
    for p in procs:
        p.until("paused", 60)
    return procs


def allowed(p):
    return sum(1 for d in p.parsed("alloc") if d.get("rc") == "0")


def run(h, c):
    ctx = h.ctx_cost()
    quota = P * ctx + K * S
    c.fig("quota_bytes", quota)
    c.fig("truth_source", h.truth_source())
    procs = start_all(h, h.env(), "bare")
    c.fig("without_allowed", [allowed(p) for p in procs])
    if h.nvml_names_pids:
        c.fig("without_driver_sum", sum(h.nvml.proc(p.pid) or 0 for p in procs))
    c.expect(all(allowed(p) == K for p in procs), "without the interceptor not every allocation was allowed: %s" % [
        allowed(p) for p in procs])
    for p in procs:
        p.cont()
        p.wait()
    with h.session(quota) as s:
        procs = start_all(h, s.env, "with")
        used = c.fig("ledger_used", s.used())
        c.expect(all(p.last("dev").get("rc") == "0" for p in procs), "a process was refused its context: %s" % [
            p.last("dev").get("rc") for p in procs])
        got = c.fig("allowed", [allowed(p) for p in procs])
        held = sum(got) * S + P * ctx
        c.expect(used <= quota, "the ledger holds %s, over the quota %s" % (fmt_bytes(used), fmt_bytes(quota)))
        c.expect(held <= quota, "the processes hold %s together, over the quota %s" % (fmt_bytes(held), fmt_bytes(quota)))
        c.expect(sum(got) >= K - P, "only %d of the %d blocks that fit were allowed" % (sum(got), K))
        if h.nvml_names_pids:
            per = [h.nvml.proc(p.pid) for p in procs]
            c.fig("driver_per_process", per)
            total = c.fig("driver_sum", sum(x or 0 for x in per))
            c.expect(total <= quota + P * 16 * MiB, "the driver counts %s for the session's processes, quota %s" % (
                fmt_bytes(total), fmt_bytes(quota)))
        victim = procs[0]
        share = allowed(victim) * S + ctx
        before = s.used()
        t0 = time.monotonic()
        victim.kill()
        after, secs = s.wait_used(lambda u: u <= before - share, 10)
        c.fig("kill9_bytes_back", before - after)
        c.fig("kill9_to_ledger_ms", None if secs is None else round((time.monotonic() - t0) * 1000, 1))
        c.expect(secs is not None, "10 s after kill -9 the ledger holds %s, %s before; the process had %s" % (
            fmt_bytes(after), fmt_bytes(before), fmt_bytes(share)))
        for p in procs[1:]:
            p.cont()
            c.expect(p.wait() == 0, "%s: %s" % (p.name, p.tail()))
