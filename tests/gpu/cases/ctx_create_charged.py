"""A created context (cuCtxCreate_v4, what CUDA 13 resolves cuCtxCreate
to, and cuCtxCreate_v2) is charged while it exists, as the driver counts
it, and given back at cuCtxDestroy; under a quota with room for one
context only, creating a second is refused with CUDA_ERROR_OUT_OF_MEMORY.
Also records where cuGetProcAddress sends cuCtxCreate at 12000 and 13000
with and without the interceptor."""

from harness import MiB, OOM, fmt_bytes

NAME = "ctx_create_charged"
PROVES = "cuCtxCreate (_v4 and _v2) is charged as the driver counts a context, given back at destroy, refused past the quota"
ORDER = 23
TIMEOUT = 60


def run(h, c):
    ctx = h.ctx_cost()
    gpa = ["gpa:cuCtxCreate:12000:0", "gpa:cuCtxCreate:13000:0"]
    rc, p, _ = h.run_probe(["dev:0"] + gpa, h.env(), "bare-gpa")
    c.fig("without_cuCtxCreate_resolves_to", [d.get("at") for d in p.parsed("gpa")])
    for ver in ("4", "2"):
        steps = ["dev:0", "pause", "ctx:0:" + ver, "pause", "ctxdestroy", "pause"]
        rc, p, snaps = h.snapshots(steps, h.env(), "bare-v" + ver)
        c.expect(rc == 0 and p.last("ctx").get("rc") == "0", "without the interceptor cuCtxCreate_v%s: %s" % (
            ver, p.tail()))
        if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
            c.fig("without_v%s_driver_delta" % ver, snaps[1]["truth"] - snaps[0]["truth"])
        with h.session(3 * ctx + 64 * MiB) as s:
            rc, p, snaps = h.snapshots(steps, s.env, "with-v" + ver, session=s)
            c.expect(rc == 0 and p.last("ctx").get("rc") == "0" and p.last("ctxdestroy").get("rc") == "0",
                     "cuCtxCreate_v%s / destroy under the quota: %s" % (ver, p.tail()))
            charged = c.fig("v%s_charged" % ver, snaps[1]["used"] - snaps[0]["used"])
            c.expect(snaps[2]["used"] == snaps[0]["used"], "v%s: after cuCtxDestroy %s charged, %s before" % (
                ver, fmt_bytes(snaps[2]["used"]), fmt_bytes(snaps[0]["used"])))
            if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
                drv = c.fig("v%s_driver_delta" % ver, snaps[1]["truth"] - snaps[0]["truth"])
                c.near(charged, drv, max(16 * MiB, drv // 10), "v%s: charged for a created context vs the driver's figure" % ver)
        with h.session(ctx + ctx // 2) as s:
            rc, p, _ = h.run_probe(["dev:0", "ctx:0:" + ver], s.env, "with-v%s-over" % ver)
            got = p.last("ctx").get("rc")
            c.fig("v%s_second_context_rc" % ver, got)
            c.expect(rc == 0 and got == str(OOM), "v%s: a second context under a quota for one: rc %s, want %d (%s)" % (
                ver, got, OOM, p.status()))
    with h.session(3 * ctx) as s:
        rc, p, _ = h.run_probe(["dev:0"] + gpa, s.env, "with-gpa")
        c.fig("with_cuCtxCreate_resolves_to", [d.get("at") for d in p.parsed("gpa")])
