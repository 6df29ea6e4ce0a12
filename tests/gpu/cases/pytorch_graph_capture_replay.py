"""PyTorch CUDA graphs: capture a small computation whose intermediates
live in the graph's private memory pool, replay it 20 times, compare with
the same computation run eagerly. With and without the interceptor: the
same answer (within float tolerance; bit-identical with exactly when
without); with it, what the process holds is charged as the driver
counts it (graph pools included)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, MiB, fmt_bytes, sync, worker_main  # noqa: E402

NAME = "pytorch_graph_capture_replay"
PROVES = "PyTorch CUDA graph capture and replay give the eager answer under a quota; graph pools charged as the driver counts"
ORDER = 73
TIMEOUT = 120


def work(args):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 2048, generator=g).cuda()
    w = torch.randn(2048, 2048, generator=g).cuda()

    def f():
        return torch.relu(x @ w).sum(dim=0) + (x * 2).mean()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = f()
    for _ in range(20):
        graph.replay()
    torch.cuda.synchronize()
    eager = f()
    torch.cuda.synchronize()
    res = {"equal": bool(torch.equal(y, eager)), "close": bool(torch.allclose(y, eager, rtol=1e-5, atol=1e-3)),
           "max_abs_diff": float((y - eager).abs().max()),
           "reserved": torch.cuda.memory_reserved()}
    sync("replayed")
    res.update(fwork.torch_info(torch))
    return res


def run(h, c):
    h.need_module("torch")
    quota = h.ctx_cost() + 2 * GiB
    out = h.framework(c, __file__, [], quota)
    bare = h.worker_ok(c, out["without"], "without")
    r = h.worker_ok(c, out["with"], "with")
    c.fig("without", {k: bare.get(k) for k in ("equal", "close", "max_abs_diff")})
    c.fig("with", {k: r.get(k) for k in ("equal", "close", "max_abs_diff", "reserved")})
    c.expect(r.get("close") is True, "with the interceptor the replayed graph differs from eager: %s" % r.get("max_abs_diff"))
    c.expect(bare.get("equal") == r.get("equal"), "replay bit-identical to eager: %s without, %s with" % (
        bare.get("equal"), r.get("equal")))
    snap = out["with"]["syncs"].get("replayed", {})
    c.fig("with_replayed", {"ledger_used": snap.get("used"), "driver": snap.get("truth")})
    if snap.get("truth") is not None and snap.get("used") is not None and h.nvml_names_pids:
        c.near(snap["used"], snap["truth"], max(64 * MiB, snap["truth"] // 10),
               "charged vs the driver's figure after replay")
    if snap.get("used") is not None:
        c.expect(snap["used"] <= quota, "the ledger holds %s over the quota" % fmt_bytes(snap["used"]))


if __name__ == "__main__":
    worker_main(work)
