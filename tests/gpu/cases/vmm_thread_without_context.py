"""PyTorch's expandable segments (and NCCL) call cuMemCreate / cuMemMap
from threads that have no current context (HAMi-core 172, 187: a hook
read an unset device and crashed). A thread with no context creates,
reserves, maps and opens 256 MiB on device 0: charged to the right GPU,
given back when another such thread unmaps and releases it, and an
allocation past the quota refused with CUDA_ERROR_OUT_OF_MEMORY. Twice: with the main
thread holding a context, and in a process where no thread ever made one
current. Without the interceptor the same steps show what the driver
itself allows."""

from harness import MiB, OOM, fmt_bytes

NAME = "vmm_thread_without_context"
PROVES = "VMM from a thread with no current context is charged to the right GPU, given back, refused past the quota"
ORDER = 21
TIMEOUT = 90

A, B = 256 * MiB, 512 * MiB


def run(h, c):
    ctx = h.ctx_cost()
    quota = ctx + A + 128 * MiB
    c.fig("quota_bytes", quota)
    variants = [
        ("main_thread_has_context", ["dev:0"]),
        ("no_context_anywhere", []),
    ]
    for vname, pre in variants:
        # past the quota whatever the context holds: more than the quota
        # less the context (main thread) or than the whole quota (none)
        big = B if pre else (quota // (2 * MiB) + 1) * 2 * MiB
        steps = pre + ["pause", "vmmthread:%d" % A, "pause", "vmmthreadfree", "pause", "vmmthread:%d" % big, "pause"]
        r = {}
        rc, p, snaps = h.snapshots(steps, h.env(), "bare-" + vname)
        made = p.parsed("vmmthread")
        bare_rcs = [(d.get("current"), d.get("rc"), d.get("map"), d.get("access")) for d in made]
        r["without"] = bare_rcs
        works = rc == 0 and len(made) == 2 and all(x == ("0", "0", "0", "0") for x in bare_rcs)
        r["driver_allows"] = works
        if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
            r["without_driver_delta"] = snaps[1]["truth"] - snaps[0]["truth"]
        with h.session(quota) as s:
            rc, p, snaps = h.snapshots(steps, s.env, "with-" + vname, session=s)
            made = p.parsed("vmmthread")
            freed = p.parsed("vmmthreadfree")
            c.expect(rc == 0, "%s: the process ended %s; %s" % (vname, p.status(), p.tail()))
            if len(made) < 2 or not freed:
                c.expect(False, "%s: steps missing: %s" % (vname, p.tail()))
                c.fig(vname, r)
                continue
            first, second = made[0], made[1]
            r["with_first"] = {k: first.get(k) for k in ("current", "rc", "reserve", "map", "access")}
            r["with_second_rc"] = second.get("rc")
            r["charged"] = snaps[1]["used"] - snaps[0]["used"]
            if not works:
                # the driver refuses this on its own: the interceptor must not
                # turn that into something else
                c.expect(first.get("rc") == made[0].get("rc"), "%s: rc differs from the driver's" % vname)
                c.fig(vname, r)
                continue
            c.expect(first.get("rc") == "0" and first.get("map") == "0" and first.get("access") == "0",
                     "%s: %s from a thread without a context: %s" % (vname, fmt_bytes(A), r["with_first"]))
            c.expect(r["charged"] >= A, "%s: charged %s for %s" % (vname, fmt_bytes(r["charged"]), fmt_bytes(A)))
            c.expect(snaps[2]["used"] == snaps[0]["used"], "%s: after unmap and release %s charged, %s before" % (
                vname, fmt_bytes(snaps[2]["used"]), fmt_bytes(snaps[0]["used"])))
            c.expect(second.get("rc") == str(OOM), "%s: %s past the quota: rc %s, want %d" % (
                vname, fmt_bytes(big), second.get("rc"), OOM))
            if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
                drv = r["driver_delta"] = snaps[1]["truth"] - snaps[0]["truth"]
                c.near(r["charged"], drv, max(16 * MiB, drv // 20), "%s: charged vs the driver's figure" % vname)
        c.fig(vname, r)
