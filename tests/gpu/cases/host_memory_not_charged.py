"""Page-locked host memory (cuMemAllocHost_v2, cuMemHostAlloc) is not GPU
memory: never charged, allowed past the quota, and the driver's
per-process figure on the GPU does not grow by it either."""

from harness import MiB, fmt_bytes

NAME = "host_memory_not_charged"
PROVES = "page-locked host memory is never charged and is allowed past the quota"
ORDER = 24
TIMEOUT = 60

N = 512 * MiB


def run(h, c):
    ctx = h.ctx_cost()
    quota = ctx + 64 * MiB
    steps = ["dev:0", "pause", "host:%d" % N, "pause", "freeall", "pause"]
    rc, p, snaps = h.snapshots(steps, h.env(), "bare")
    hl = p.last("host")
    c.expect(rc == 0 and hl.get("allochost") == "0" and hl.get("hostalloc") == "0",
             "without the interceptor: %s" % p.tail())
    if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
        c.fig("without_driver_delta", snaps[1]["truth"] - snaps[0]["truth"])
    with h.session(quota) as s:
        rc, p, snaps = h.snapshots(steps, s.env, "with", session=s)
        hl = p.last("host")
        c.fig("rcs", {"cuMemAllocHost_v2": hl.get("allochost"), "cuMemHostAlloc": hl.get("hostalloc")})
        c.expect(rc == 0 and hl.get("allochost") == "0" and hl.get("hostalloc") == "0",
                 "2 x %s of host memory under a quota of %s: %s" % (fmt_bytes(N), fmt_bytes(quota), p.tail()))
        c.expect(snaps[1]["used"] == snaps[0]["used"], "host memory charged: %s" % fmt_bytes(
            snaps[1]["used"] - snaps[0]["used"]))
        c.expect(snaps[2]["used"] == snaps[0]["used"], "charge changed after freeing host memory")
        if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
            drv = c.fig("driver_delta", snaps[1]["truth"] - snaps[0]["truth"])
            c.expect(drv < 16 * MiB, "the driver shows %s more on the GPU for host memory" % fmt_bytes(drv))
