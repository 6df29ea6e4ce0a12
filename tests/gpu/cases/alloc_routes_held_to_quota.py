"""Every device-memory allocation route is charged what it allocates,
refused past the quota with CUDA_ERROR_OUT_OF_MEMORY, and gives its charge
back when freed: cuMemAlloc_v2, cuMemAllocPitch_v2, cuArrayCreate_v2,
cuArray3DCreate_v2, cuMipmappedArrayCreate, cuMemAllocManaged,
cuMemAllocAsync (the device's default pool), cuMemAllocFromPoolAsync (a
created pool), cuMemCreate + cuMemMap.

Each route runs in a fresh process, the same steps with and without the
interceptor: take the context, allocate 256 MiB, then 512 MiB, free
everything. Under a quota of context + 384 MiB the second allocation must
be refused; without the interceptor both succeed (the route works on this
driver). The charge is compared with the driver's own figure for the
process (NVML) at each step."""

from harness import MiB, OOM, fmt_bytes

NAME = "alloc_routes_held_to_quota"
PROVES = "every allocation route is charged as the driver counts it, refused past the quota (out of memory), given back when freed"
ORDER = 20
TIMEOUT = 120

A, B = 256 * MiB, 512 * MiB


def routes():
    w = 16384  # pitch rows of 16 KiB
    return [
        # name, setup, allocate(n), free, line head, compare with NVML
        ("cuMemAlloc_v2", [], lambda n: ["alloc:%d" % n], ["freeall"], "alloc", True),
        ("cuMemAllocPitch_v2", [], lambda n: ["pitch:%d:%d" % (w, n // (w))], ["freeall"], "pitch", True),
        ("cuArrayCreate_v2", [], lambda n: ["array:8192:%d" % (n // (8192 * 4))], ["freeall"], "array", True),
        ("cuArray3DCreate_v2", [], lambda n: ["array3d:512:512:%d" % (n // (512 * 512 * 4))], ["freeall"],
         "array3d", True),
        ("cuMipmappedArrayCreate", [], lambda n: ["mipmap:8192:%d:1" % (n // (8192 * 4))], ["freeall"],
         "mipmap", True),
        # Managed memory is charged when allocated (gpuslice's policy); the
        # driver shows it on the GPU only once it is touched there.
        ("cuMemAllocManaged", [], lambda n: ["managed:%d" % n], ["freeall"], "managed", False),
        ("cuMemAllocAsync", [], lambda n: ["async:%d" % n], ["freeall", "sync"], "async", True),
        ("cuMemAllocFromPoolAsync", ["mkpool:0"], lambda n: ["spool:%d" % n], ["freeall", "sync"], "spool", True),
        ("cuMemCreate+cuMemMap", ["reserve:2G"], lambda n, off=[0]: ["vmmmapq:%d" % n],
         ["unmap", "unmap", "addrfree"], "vmmmapq", True),
    ]


def rc_of(line):
    if not line:
        return None
    rc = int(line.get("rc", -1))
    if rc == 0 and "map" in line:
        rc = int(line["map"])
    return rc


def steps_for(setup, alloc, free):
    return ["dev:0"] + setup + ["pause"] + alloc(A) + ["pause"] + alloc(B) + ["pause"] + free + ["pause"]


def run(h, c):
    ctx = h.ctx_cost()
    quota = ctx + A + 128 * MiB
    c.fig("quota_bytes", quota)
    c.fig("truth_source", h.truth_source())
    for name, setup, alloc, free, head, compare in routes():
        steps = steps_for(setup, alloc, free)
        r = {}
        # without the interceptor: the route works on this driver
        rc, p, snaps = h.snapshots(steps, h.env(), "bare-" + head)
        first, second = rc_of(p.last(head, snaps[1]["n"])), rc_of(p.last(head, snaps[2]["n"]))
        c.expect(rc == 0 and first == 0 and second == 0,
                 "%s without the interceptor: rcs %s, %s (%s)" % (name, first, second, p.status()))
        if snaps[1]["truth"] is not None and snaps[0]["truth"] is not None:
            r["without_driver_delta_a"] = snaps[1]["truth"] - snaps[0]["truth"]
        # with the interceptor
        with h.session(quota) as s:
            rc, p, snaps = h.snapshots(steps, s.env, "with-" + head, session=s)
            first, second = rc_of(p.last(head, snaps[1]["n"])), rc_of(p.last(head, snaps[2]["n"]))
            r["first_rc"], r["second_rc"] = first, second
            charged = snaps[1]["used"] - snaps[0]["used"]
            r["charged_a"] = charged
            c.expect(rc == 0, "%s: the process ended %s" % (name, p.status()))
            c.expect(first == 0, "%s: %s under the quota: rc %s" % (name, fmt_bytes(A), first))
            c.expect(second == OOM, "%s: %s past the quota: rc %s, want %d (out of memory)" % (
                name, fmt_bytes(B), second, OOM))
            c.expect(charged >= A, "%s: charged %s for %s" % (name, fmt_bytes(charged), fmt_bytes(A)))
            c.expect(snaps[2]["used"] == snaps[1]["used"], "%s: the refused allocation changed the charge %s -> %s" % (
                name, fmt_bytes(snaps[1]["used"]), fmt_bytes(snaps[2]["used"])))
            c.expect(snaps[3]["used"] == snaps[0]["used"], "%s: after the frees %s charged, %s before" % (
                name, fmt_bytes(snaps[3]["used"]), fmt_bytes(snaps[0]["used"])))
            if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
                drv = snaps[1]["truth"] - snaps[0]["truth"]
                r["driver_delta_a"] = drv
                r["driver_delta_after_free"] = snaps[3]["truth"] - snaps[0]["truth"]
                if compare:
                    c.near(charged, drv, max(16 * MiB, drv // 20), "%s: charged vs the driver's figure" % name)
                    c.near(snaps[3]["truth"], snaps[0]["truth"], 16 * MiB,
                           "%s: the driver's figure after the frees vs before" % name)
        c.fig(name, r)
