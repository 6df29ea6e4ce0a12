"""A job the interceptor holds to its quota is never stopped by the audit.
The interceptor charges what a program asks for; the driver's own figure
for the process (NVML, what gpusliced's audit reads) also holds what the
driver takes beyond that: allocations rounded up to its page size, small
blocks packed into larger ones, freed memory a stream-ordered pool keeps
(release threshold "max", as PyTorch's and RMM's pools set it), also
while the program allocates outside the pool. A process that fills its
quota that way must stay within the quota by the driver's figure and
outlive three audit intervals; the figures say how much the driver took
beyond the charge in each pattern, and (without the interceptor) how much
the driver's figure grows per block of each size. (fakecuda rounds as an
H100 with driver 580 was seen to, docs/fakecuda.md; its pools keep what is
freed as the driver's do, which the interceptor charges:
docs/charging.md "What a pool keeps".)

Each pattern runs in a fresh process: with the interceptor in a session of
context + 512 MiB, filling until refused; then without the interceptor,
making as many blocks as the session allowed (the driver's figure for the
same work)."""

from harness import MiB, OOM, CaseError, fmt_bytes

NAME = "driver_overhead_within_quota"
PROVES = "a process filling its quota with odd sizes, small blocks or a caching pool stays within it by the driver's figure and is not stopped by the audit"
ORDER = 25
TIMEOUT = 150

ROOM = 512 * MiB
AUDIT_WAIT_MS = 1600  # gpusliced audits every 500 ms and confirms before it acts


def patterns():
    # name, steps before the fill, the fill step (size), steps after, the fill's line head
    return [
        ("odd_3MiB", [], "fill:3M", [], "fill"),
        ("page_plus_4KiB", [], "fill:2052K", [], "fill"),
        ("small_64KiB", [], "fill:64K", [], "fill"),
        # a pool that keeps what is freed: 3 MiB blocks, all freed, then
        # 5 MiB blocks from the same pool
        ("pool_kept_3_then_5MiB", ["pthresh:max", "afill:3M", "freeall", "sync"], "afill:5M", ["pinfo"],
         "afill"),
        # the same pool's freed memory, then cuMemAlloc, which does not draw
        # from it: the interceptor gave the pool's bytes back at the frees
        ("pool_kept_then_cuMemAlloc", ["pthresh:max", "afill:3M", "freeall", "sync"], "fill:3M", ["pinfo"],
         "fill"),
    ]


# block sizes whose cost the driver's figure shows, without the
# interceptor: where rounding to its page starts (docs/interceptor.md)
GRANULE_SIZES = ["4K", "64K", "512K", "1020K", "1M", "1028K", "1536K", "2044K", "2M", "2052K", "3M"]
GRANULE_BLOCKS = 64


def granule(h, c):
    """Without the interceptor: how much the driver's figure for the
    process grows per cuMemAlloc block of each size (GRANULE_BLOCKS
    blocks each, held)."""
    steps = ["dev:0", "pause"]
    for sz in GRANULE_SIZES:
        steps += ["fill:%s:%d" % (sz, GRANULE_BLOCKS), "pause"]
    rc, p, snaps = h.snapshots(steps, h.env(), "granule")
    out = {}
    for k, sz in enumerate(GRANULE_SIZES):
        if k + 1 < len(snaps) and snaps[k]["truth"] is not None and snaps[k + 1]["truth"] is not None:
            out[sz] = (snaps[k + 1]["truth"] - snaps[k]["truth"]) // GRANULE_BLOCKS
    c.fig("driver_bytes_per_block_without", out)


def run(h, c):
    if h.truth_source() == "NVML per-process":
        granule(h, c)
    ctx = h.ctx_cost()
    quota = ctx + ROOM
    c.fig("quota_bytes", quota)
    c.fig("truth_source", h.truth_source())
    per_process = h.truth_source() == "NVML per-process"
    for name, pre, fill, post, head in patterns():
        r = {}
        steps = ["dev:0"] + pre + [fill, "sleep:%d" % AUDIT_WAIT_MS, "pause"] + post + ["freeall", "sync"]
        with h.session(quota) as s:
            try:
                rc, p, snaps = h.snapshots(steps, s.env, "with-" + name, session=s)
            except CaseError as e:  # ended before its pause: the audit's lines say whether it stopped it
                audit = [l for l in h.daemon_lines("audit") if s.id in l]
                r["audit"] = audit[-3:]
                c.expect(False, "%s: %s; audit: %s" % (name, e, audit[-3:]))
                c.fig(name, r)
                continue
            filled = p.last(head)
            n = int(filled.get("n", 0))
            r["blocks"] = n
            r["fill_rc"] = filled.get("rc")
            r["status"] = p.status()
            if snaps:
                r["charged"] = snaps[0]["used"]
                r["driver"] = snaps[0]["truth"]
                if snaps[0]["truth"] is not None and per_process:
                    r["driver_beyond_charge"] = snaps[0]["truth"] - snaps[0]["used"]
            if post:
                r["pool"] = {k: p.last("pinfo").get(k) for k in ("reserved", "used")}
            audit = [l for l in h.daemon_lines("audit") if s.id in l]
            if audit:
                r["audit"] = audit[-3:]
            c.expect(rc == 0, "%s: the process ended %s (audit: %s); %s" % (name, p.status(), audit[-3:], p.tail()))
            c.expect(filled.get("rc") == str(OOM), "%s: the fill ended with rc %s, want %d (refused at the quota)" % (
                name, filled.get("rc"), OOM))
            c.expect(n > 0, "%s: no block was allowed" % name)
            if snaps and snaps[0]["truth"] is not None and per_process:
                c.expect(snaps[0]["truth"] <= quota, "%s: the driver's figure %s is over the quota %s (charged %s)" % (
                    name, fmt_bytes(snaps[0]["truth"]), fmt_bytes(quota), fmt_bytes(snaps[0]["used"])))
        # without the interceptor: each fill makes as many blocks as it did
        # in the session (never "until refused" on the whole GPU)
        counts = [d.get("n") for d in p.parsed() if d["_"] in ("fill", "afill")]
        fills = [st for st in steps if st.split(":")[0] in ("fill", "afill")]
        if n > 0 and len(counts) == len(fills):
            bare, k = [], 0
            for st in steps:
                if st in fills:
                    st = "%s:%s" % (st, counts[k])
                    k += 1
                if not st.startswith("sleep:"):
                    bare.append(st)
            rc, p, snaps = h.snapshots(bare, h.env(), "bare-" + name)
            c.expect(rc == 0 and p.last(head).get("n") == str(n), "%s without the interceptor: %s" % (name, p.tail()))
            if snaps and snaps[0]["truth"] is not None:
                r["without_driver"] = snaps[0]["truth"]
        c.fig(name, r)
