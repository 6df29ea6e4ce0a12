"""NCCL through torch.distributed: a world of one rank on the GPU inits
(ncclCommInitRank, NCCL >= 2.19 allocating its buffers with cuMemCreate
where NCCL_CUMEM_ENABLE is on, the default) and all_reduce finishes, with
and without the interceptor; with it, what NCCL allocated is charged as
the driver counts it. Then two processes on the one GPU, as far as NCCL
allows them (recorded, compared with and without the interceptor)."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, MiB, sync, worker_main  # noqa: E402

NAME = "nccl_single_rank"
PROVES = "torch.distributed with NCCL inits and all_reduces under a quota; NCCL's buffers are charged"
ORDER = 77
TIMEOUT = 180


def rank_main(rank, world, path, q):
    import torch
    import torch.distributed as dist
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method="file://" + path, rank=rank, world_size=world)
        x = torch.full((1 << 20,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        q.put((rank, float(x[0]), None))
        dist.destroy_process_group()
    except Exception as e:
        q.put((rank, None, "%s: %s" % (type(e).__name__, str(e)[:300])))


def work(args):
    import torch
    import torch.distributed as dist
    mode = args[0]
    res = {}
    if mode == "one":
        torch.cuda.set_device(0)
        x = torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()
        sync("before_init")
        path = tempfile.mktemp(prefix="gs-nccl-")
        dist.init_process_group("nccl", init_method="file://" + path, rank=0, world_size=1)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        sync("after_all_reduce")
        res["value"] = float(x[0])
        dist.destroy_process_group()
    else:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        path = tempfile.mktemp(prefix="gs-nccl2-")
        procs = [ctx.Process(target=rank_main, args=(r, 2, path, q)) for r in range(2)]
        for p in procs:
            p.start()
        got = []
        for _ in procs:
            try:
                got.append(q.get(timeout=30))
            except Exception as e:
                got.append((None, None, "no answer: %s" % type(e).__name__))
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        res["ranks"] = sorted(got, key=lambda g: (g[0] is None, g[0] or 0))
    try:
        v = torch.cuda.nccl.version()
        res["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception as e:
        res["nccl"] = "n/a (%s)" % e
    res.update(fwork.torch_info(torch))
    return res


def run(h, c):
    h.need_module("torch")
    quota = h.ctx_cost() + 2 * GiB
    env = {"NCCL_DEBUG": "WARN"}
    out = h.framework(c, __file__, ["one"], quota, env, timeout=80)
    bare = h.worker_ok(c, out["without"], "without")
    r = h.worker_ok(c, out["with"], "with")
    c.fig("nccl", r.get("nccl") or bare.get("nccl"))
    c.expect(r.get("value") == 1.0, "all_reduce over one rank gave %s" % r.get("value"))
    w = out["with"]["syncs"]
    b, a = w.get("before_init", {}), w.get("after_all_reduce", {})
    if b.get("used") is not None and a.get("used") is not None:
        charged = c.fig("nccl_charged", a["used"] - b["used"])
        if b.get("truth") is not None and a.get("truth") is not None:
            drv = c.fig("nccl_driver_delta", a["truth"] - b["truth"])
            c.near(charged, drv, max(32 * MiB, abs(drv) // 10), "NCCL's memory: charged vs the driver's figure")
    wo = out["without"]["syncs"]
    if wo.get("before_init", {}).get("truth") is not None and wo.get("after_all_reduce", {}).get("truth") is not None:
        c.fig("without_nccl_driver_delta", wo["after_all_reduce"]["truth"] - wo["before_init"]["truth"])
    # two ranks on one GPU: whatever NCCL says, it must say the same with
    # the interceptor (NCCL 2.28 refuses: "Duplicate GPU detected"; then
    # the interceptor's side is not run)
    quota2 = 2 * h.ctx_cost() + 2 * GiB
    two = h.framework(c, __file__, ["two"], quota2, env, timeout=45, sides=("without",))
    tb = (two["without"].get("result") or {}).get("ranks")
    ok_b = bool(tb) and all(x[2] is None for x in tb)
    tw = None
    if ok_b:
        two = h.framework(c, __file__, ["two"], quota2, env, timeout=45, sides=("with",))
        tw = (two["with"].get("result") or {}).get("ranks")
    c.fig("two_ranks_one_gpu", {"without": tb, "with": tw if ok_b else "not run: NCCL refused two ranks on one GPU"})
    ok_w = bool(tw) and all(x[2] is None for x in tw)
    c.expect(ok_w or not ok_b, "two ranks on one GPU work without the interceptor but not with it: %s" % tw)
    if ok_w:
        c.expect(all(x[1] == 3.0 for x in tw), "two-rank all_reduce gave %s, want 3.0" % tw)


if __name__ == "__main__":
    worker_main(work)
