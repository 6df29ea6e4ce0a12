"""What the CUDA runtime does to reach the driver: cuGetProcAddress_v2 and
the 4-argument cuGetProcAddress, at CUDA versions 12000 and 13000, with
and without CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. The cuMemAlloc
(and, per-thread, cuMemAllocAsync) each answer gives is charged and
refused past the quota; where each answer points is recorded, with and
without the interceptor: only a real driver can say whether its answers
are its exported symbols (native/interceptor/dispatch.c's gpa_rewrite
names a private entry point by asking the driver for each hooked
variant; fakecuda's FAKECUDA_PROCADDR=private answers that way)."""

from harness import MiB, OOM, fmt_bytes

NAME = "routes_getprocaddress_charged"
PROVES = "allocations through cuGetProcAddress(_v2) at 12000/13000, with and without the per-thread flag, are charged"
ORDER = 40
TIMEOUT = 90

A = 64 * MiB


def combos():
    for step in ("gpakeep", "gpa4keep"):
        for ver in (12000, 13000):
            for fl in (0, 2):
                yield step, ver, fl


def run(h, c):
    ctx = h.ctx_cost()
    quota = ctx + 2 * A + 32 * MiB
    big = 4 * A
    c.fig("quota_bytes", quota)
    for step, ver, fl in combos():
        key = "%s_%d_%s" % ("cuGetProcAddress_v2" if step == "gpakeep" else "cuGetProcAddress", ver,
                            "ptds" if fl else "default")
        r = {}
        steps = ["dev:0", "pause", "%s:%d:%d:%d" % (step, ver, fl, A)]
        if fl:
            steps.append("gpaasync:%d:%d:%d" % (ver, fl, A))
        steps += ["pause", "%s:%d:%d:%d" % (step, ver, fl, big), "pause"]
        rc, p, snaps = h.snapshots(steps, h.env(), "bare-" + key)
        lines = p.parsed(step)
        r["without_at"] = lines[0].get("alloc_at") if lines else None
        if fl:
            r["without_async_at"] = p.last("gpaasync").get("alloc_at")
        c.expect(rc == 0 and len(lines) == 2 and all(d.get("alloc") == "0" for d in lines),
                 "%s without the interceptor: %s" % (key, p.tail()))
        with h.session(quota) as s:
            rc, p, snaps = h.snapshots(steps, s.env, "with-" + key, session=s)
            lines = p.parsed(step)
            c.expect(rc == 0 and len(lines) == 2, "%s: %s" % (key, p.tail()))
            if len(lines) < 2:
                c.fig(key, r)
                continue
            n = 2 if fl else 1
            r["with_at"] = lines[0].get("alloc_at")
            r["charged"] = snaps[1]["used"] - snaps[0]["used"]
            r["rcs"] = [lines[0].get("alloc"), lines[1].get("alloc")]
            if fl:
                r["with_async_at"] = p.last("gpaasync").get("alloc_at")
                r["async_rc"] = p.last("gpaasync").get("alloc")
                c.expect(r["async_rc"] == "0", "%s: cuMemAllocAsync through it: rc %s" % (key, r["async_rc"]))
            c.expect(r["rcs"][0] == "0", "%s: %s through it: rc %s" % (key, fmt_bytes(A), r["rcs"][0]))
            c.expect(r["charged"] >= n * A, "%s: charged %s for %s allocated through its answers" % (
                key, fmt_bytes(r["charged"]), fmt_bytes(n * A)))
            c.expect(r["rcs"][1] == str(OOM), "%s: %s past the quota through it: rc %s, want %d" % (
                key, fmt_bytes(big), r["rcs"][1], OOM))
        c.fig(key, r)
