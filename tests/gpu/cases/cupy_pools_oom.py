"""CuPy's default memory pool and its stream-ordered pool
(cupy.cuda.MemoryAsyncPool): arrays of 256 MiB until
cupy.cuda.memory.OutOfMemoryError under a quota of a context + 2 GiB;
cupy.cuda.runtime.memGetInfo() gives the quota as the total; after
free_all_blocks() as many arrays are made again. Without the interceptor
every array is made."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import GiB, MiB, fmt_bytes, sync, worker_main  # noqa: E402

NAME = "cupy_pools_oom"
PROVES = "CuPy's default and async pools: OutOfMemoryError at the quota, memGetInfo shows it, memory reusable"
ORDER = 66
TIMEOUT = 150

BLOCK = 256 * MiB


def work(args):
    import cupy as cp
    mode, most = args[0], int(args[1])
    if mode == "async":
        pool = cp.cuda.MemoryAsyncPool()
    else:
        pool = cp.get_default_memory_pool()
    cp.cuda.set_allocator(pool.malloc)
    free, total = cp.cuda.runtime.memGetInfo()
    held, oom = [], None
    while len(held) < most:
        try:
            held.append(cp.empty((BLOCK,), dtype=cp.uint8))
        except Exception as e:
            oom = "%s: %s" % (type(e).__name__, str(e)[:300])
            oom_type = isinstance(e, cp.cuda.memory.OutOfMemoryError)
            break
    cp.cuda.Device().synchronize()
    n = len(held)
    sync("full", n=n)
    del held[:]
    pool.free_all_blocks()
    cp.cuda.Device().synchronize()
    again = 0
    again_error = None
    try:
        for _ in range(n):
            held.append(cp.empty((BLOCK,), dtype=cp.uint8))
            again += 1
    except Exception as e:
        again_error = str(e)[:200]
    return {"mem_get_info": [free, total], "n": n, "oom": oom, "oom_is_cupy_oom": oom_type if oom else None,
            "again": again, "again_error": again_error, "cupy": cp.__version__}


def run(h, c):
    h.need_module("cupy")
    quota = h.ctx_cost() + 2 * GiB
    most = quota // BLOCK + 4
    for mode in ("default", "async"):
        out = h.framework(c, __file__, [mode, str(most)], quota, timeout=60)
        why = h.unsupported(out) if mode == "async" else None
        if why:
            c.fig(mode, "fails without the interceptor too, so not tried: %s" % why)
            continue
        bare = h.worker_ok(c, out["without"], mode + " without")
        r = h.worker_ok(c, out["with"], mode + " with")
        full = out["with"]["syncs"].get("full", {})
        c.fig(mode, {"without_n": bare.get("n"), "with_n": r.get("n"), "with_oom": r.get("oom"),
                     "mem_get_info": r.get("mem_get_info"), "again": r.get("again"), "ledger_full": full.get("used"),
                     "driver_full": full.get("truth"), "audit": out["with"].get("audit"), "cupy": r.get("cupy")})
        c.expect(bare.get("n") == most, "%s pool without the interceptor: %s of %d arrays" % (mode, bare.get("n"), most))
        c.expect(r.get("oom_is_cupy_oom") is True, "%s pool: no OutOfMemoryError under %s (%s)" % (
            mode, fmt_bytes(quota), r.get("oom")))
        mgi = r.get("mem_get_info") or [None, None]
        c.expect(mgi[1] == quota, "%s pool: memGetInfo total %s, quota %s" % (mode, mgi[1], quota))
        c.expect(r.get("again") == r.get("n"), "%s pool: %s of %s made again (%s)" % (
            mode, r.get("again"), r.get("n"), r.get("again_error")))
        if full.get("used") is not None:
            c.expect(full["used"] <= quota, "%s pool: the ledger held %s" % (mode, fmt_bytes(full["used"])))


if __name__ == "__main__":
    worker_main(work)
