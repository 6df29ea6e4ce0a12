"""A job's other processes are charged to the same session: a DataLoader
with two fork workers (pinned batches, moved to the GPU by the main
process) and a spawn pool of two processes that each allocate 256 MiB on
the GPU. While the children hold their memory, the session lists them,
its ledger holds the main process's and theirs, and the driver's
per-process figures agree; when they exit their bytes come back."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, MiB, fmt_bytes, sync, worker_main  # noqa: E402

NAME = "pytorch_worker_processes_charged"
PROVES = "DataLoader fork workers and a spawn pool's CUDA processes are charged to the job's session"
ORDER = 76
TIMEOUT = 150

CHILD = 256 * MiB


def child(q, ev, nbytes):
    import torch
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    q.put(os.getpid())
    ev.wait(120)
    del t


def work(args):
    import multiprocessing as mp

    import torch
    from torch.utils.data import DataLoader, TensorDataset
    main = torch.empty(CHILD, dtype=torch.uint8, device="cuda")
    ds = TensorDataset(torch.arange(64 * 1024, dtype=torch.float32).view(64, 1024))
    dl = DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="fork", pin_memory=True)
    total = 0.0
    for (b,) in dl:
        total += float(b.cuda(non_blocking=True).sum())
    ctx = mp.get_context("spawn")
    q, ev = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=child, args=(q, ev, CHILD)) for _ in range(2)]
    for p in procs:
        p.start()
    pids = sorted(q.get(timeout=120) for _ in procs)
    sync("held", children=pids, main=os.getpid())
    ev.set()
    for p in procs:
        p.join(60)
    time.sleep(1)  # gpusliced hears of their exit through pidfds
    sync("children_gone")
    del main
    res = {"dataloader_sum": total, "children": pids, "child_exit": [p.exitcode for p in procs]}
    res.update(fwork.torch_info(torch))
    return res


def run(h, c):
    h.need_module("torch")
    quota = 3 * h.ctx_cost() + 2 * GiB
    out = h.framework(c, __file__, [], quota, timeout=140)
    bare = h.worker_ok(c, out["without"], "without")
    r = h.worker_ok(c, out["with"], "with")
    c.expect(bare.get("dataloader_sum") == r.get("dataloader_sum"), "DataLoader sums differ: %s / %s" % (
        bare.get("dataloader_sum"), r.get("dataloader_sum")))
    held = out["with"]["syncs"].get("held", {})
    gone = out["with"]["syncs"].get("children_gone", {})
    kids = held.get("children") or []
    c.fig("session_pids_held", held.get("session_pids"))
    c.fig("children", kids)
    c.fig("ledger_used_held", held.get("used"))
    c.fig("ledger_used_children_gone", gone.get("used"))
    c.fig("driver_children_held", held.get("truth_children"))
    c.expect(all(k in (held.get("session_pids") or []) for k in kids) and kids,
             "the spawn pool's processes %s are not the session's %s" % (kids, held.get("session_pids")))
    ctx = h.ctx_cost()
    if held.get("used") is not None:
        c.expect(held["used"] >= 3 * CHILD + 2 * ctx, "the ledger holds %s with the main process and two children of %s each" % (
            fmt_bytes(held["used"]), fmt_bytes(CHILD)))
    if held.get("used") is not None and gone.get("used") is not None:
        back = held["used"] - gone["used"]
        c.fig("bytes_back_children_exit", back)
        c.expect(back >= 2 * CHILD, "the children's exit gave back %s" % fmt_bytes(back))


if __name__ == "__main__":
    worker_main(work)
