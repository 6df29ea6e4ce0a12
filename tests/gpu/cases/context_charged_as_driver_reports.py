"""A fresh process's CUDA context, with lazy and with eager module loading,
is charged what the driver reports for it (NVML's per-process figure), and
given back when the process ends.

Same workload with and without the interceptor: cuInit, retain device 0's
primary context, make it current, pause. Without: what the context costs
by NVML. With: what the session's ledger charged against what NVML
reports for the same process."""

from harness import MiB, fmt_bytes

NAME = "context_charged_as_driver_reports"
PROVES = "a context (lazy and eager loading) is charged what NVML reports for the process, and given back at exit"
ORDER = 10
TIMEOUT = 60


def run(h, c):
    ctx = h.ctx_cost()
    c.fig("truth_source", h.truth_source())
    c.fig("context_daemon_bytes", h.daemon_ctx_cost())
    for mode in ("LAZY", "EAGER"):
        m = mode.lower()
        rc, p, snaps = h.snapshots(["dev:0", "pause"], h.env({"CUDA_MODULE_LOADING": mode}), "bare-" + m)
        c.expect(rc == 0 and p.last("dev").get("rc") == "0", "%s without the interceptor: dev %s, %s" % (
            mode, p.last("dev"), p.status()))
        bare = c.fig("without_%s_nvml_bytes" % m, snaps[0]["truth"])
        with h.session(3 * ctx + 256 * MiB) as s:
            env = dict(s.env, CUDA_MODULE_LOADING=mode)
            rc, p, snaps = h.snapshots(["dev:0", "pause"], env, "with-" + m, session=s)
            c.expect(rc == 0 and p.last("dev").get("rc") == "0", "%s with the interceptor: dev %s, %s" % (
                mode, p.last("dev"), p.status()))
            charged = c.fig("with_%s_charged_bytes" % m, snaps[0]["used"])
            truth = c.fig("with_%s_nvml_bytes" % m, snaps[0]["truth"])
            if truth is not None and h.nvml_names_pids is False:
                truth = None  # only a difference of device figures would mean anything
            tol = max(16 * MiB, (truth or 0) // 20)
            c.near(charged, truth, tol, "%s: charged for the context vs the driver's figure" % mode)
            if bare is not None and truth is not None:
                c.fig("%s_with_minus_without_bytes" % m, truth - bare)
            after, secs = s.wait_used(lambda u: u == 0, 10)
            c.expect(secs is not None, "%s: %s still charged 10 s after the process exited" % (mode, fmt_bytes(after)))
