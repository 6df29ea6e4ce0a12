"""CUDA graph memory nodes: the driver allocates a graph's memory when the
executable graph is launched, from the device's graph pool, and keeps it
until cuDeviceGraphMemTrim. A graph allocating and freeing 256 MiB is
charged what the pool holds after its launch, given back at trim, and a
graph of 512 MiB past the quota is refused at launch with
CUDA_ERROR_OUT_OF_MEMORY. Without the interceptor both launch."""

from harness import MiB, OOM, fmt_bytes

NAME = "graph_memory_nodes_charged"
PROVES = "graph memory nodes are charged at launch as the pool grows, given back at trim, refused past the quota"
ORDER = 22
TIMEOUT = 60

A, B = 256 * MiB, 512 * MiB


def steps():
    return ["dev:0", "pause",
            "galloc:0:%d:free" % A, "glaunch", "sync", "gmem:0", "pause",
            "gexecdestroy", "gtrim:0", "sync", "pause",
            "galloc:0:%d:free" % B, "glaunch", "sync", "pause",
            "gexecdestroy", "gtrim:0"]


def launches(p):
    return [d.get("rc") for d in p.parsed("glaunch")]


def run(h, c):
    ctx = h.ctx_cost()
    quota = ctx + A + 128 * MiB
    c.fig("quota_bytes", quota)
    rc, p, snaps = h.snapshots(steps(), h.env(), "bare")
    c.expect(rc == 0 and launches(p) == ["0", "0"], "without the interceptor: launches %s (%s); %s" % (
        launches(p), p.status(), p.tail()))
    if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
        c.fig("without_driver_delta", snaps[1]["truth"] - snaps[0]["truth"])
    c.fig("without_graph_pool", p.last("gmem"))
    with h.session(quota) as s:
        rc, p, snaps = h.snapshots(steps(), s.env, "with", session=s)
        c.expect(rc == 0, "the process ended %s; %s" % (p.status(), p.tail()))
        ls = launches(p)
        c.fig("launch_rcs", ls)
        gm = p.last("gmem")
        c.fig("graph_pool", {k: gm.get(k) for k in ("used", "reserved")})
        charged = c.fig("charged", snaps[1]["used"] - snaps[0]["used"])
        c.expect(len(ls) == 2 and ls[0] == "0", "launch of %s: %s" % (fmt_bytes(A), ls))
        c.expect(len(ls) == 2 and ls[1] == str(OOM), "launch of %s past the quota: %s, want %d" % (fmt_bytes(B), ls, OOM))
        c.expect(charged >= A, "charged %s after a launch allocating %s" % (fmt_bytes(charged), fmt_bytes(A)))
        if gm.get("reserved"):
            c.expect(charged == int(gm["reserved"]), "charged %s, the driver's graph pool holds %s" % (
                fmt_bytes(charged), fmt_bytes(int(gm["reserved"]))))
        c.expect(snaps[2]["used"] == snaps[0]["used"], "after trim %s charged, %s before" % (
            fmt_bytes(snaps[2]["used"]), fmt_bytes(snaps[0]["used"])))
        c.expect(snaps[3]["used"] == snaps[0]["used"], "the refused launch left %s charged" % fmt_bytes(
            snaps[3]["used"] - snaps[0]["used"]))
        if snaps[0]["truth"] is not None and snaps[1]["truth"] is not None:
            drv = c.fig("driver_delta", snaps[1]["truth"] - snaps[0]["truth"])
            c.near(charged, drv, max(16 * MiB, drv // 20), "charged vs the driver's figure after the launch")
            c.near(snaps[2]["truth"], snaps[0]["truth"], 16 * MiB, "the driver's figure after trim vs before")
