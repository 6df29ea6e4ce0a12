"""A Python process that reaches the driver through ctypes (dlopen of
libcuda.so.1 and dlsym of each entry point, as cuda-python, Numba and
many tools do): cuMemGetInfo_v2 gives the quota as the total, blocks of
256 MiB are allocated until CUDA_ERROR_OUT_OF_MEMORY under a quota of a
context + 1 GiB, and freeing them gives the charge back; the ledger and
the driver's per-process figure agree. Without the interceptor every
block is allocated. The first refusal writes the interceptor's line on
the worker's stderr, naming the quota. It needs no framework, so it runs
on fakecuda too, and with it the harness's worker machinery the framework
cases use."""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, MiB, OOM, fmt_bytes, sync, worker_main  # noqa: E402

NAME = "python_ctypes_driver_held_to_quota"
PROVES = "a Python process using the driver through ctypes (dlopen + dlsym) is held to the quota and sees it"
ORDER = 45
TIMEOUT = 60

BLOCK = 256 * MiB


def work(args):
    most = int(args[0])
    cu = ctypes.CDLL("libcuda.so.1")
    size_t, ptr = ctypes.c_size_t, ctypes.c_uint64

    def call(name, *a):
        return getattr(cu, name)(*a)

    assert call("cuInit", 0) == 0
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert call("cuDeviceGet", ctypes.byref(dev), 0) == 0
    assert call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev) == 0
    assert call("cuCtxSetCurrent", ctx) == 0
    free, total = size_t(), size_t()
    rc = call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    held, last = [], 0
    while len(held) < most:
        p = ptr()
        last = call("cuMemAlloc_v2", ctypes.byref(p), size_t(BLOCK))
        if last != 0:
            break
        held.append(p)
    sync("full", n=len(held))
    bad = sum(1 for p in held if call("cuMemFree_v2", p) != 0)
    sync("freed")
    call("cuDevicePrimaryCtxRelease_v2", dev)
    return {"meminfo_rc": rc, "free": free.value, "total": total.value, "n": len(held), "last_rc": last,
            "free_failed": bad}


def run(h, c):
    ctx = h.ctx_cost()
    quota = ctx + 1 * GiB + 64 * MiB
    most = quota // BLOCK + 4
    c.fig("quota_bytes", quota)
    out = h.framework(c, __file__, [str(most)], quota)
    bare = h.worker_ok(c, out["without"], "without")
    r = h.worker_ok(c, out["with"], "with")
    c.fig("without", bare)
    c.fig("with", r)
    c.expect(bare.get("n") == most, "without the interceptor %s of %d blocks" % (bare.get("n"), most))
    c.expect(r.get("total") == quota, "cuMemGetInfo_v2 total %s, quota %s" % (r.get("total"), quota))
    c.expect(r.get("n") == (quota - ctx) // BLOCK and r.get("last_rc") == OOM,
             "%s blocks of %s, then rc %s; want %d, then %d" % (r.get("n"), fmt_bytes(BLOCK), r.get("last_rc"),
                                                                (quota - ctx) // BLOCK, OOM))
    fwork.refusal_expectations(c, out, quota)
    full, freed = out["with"]["syncs"].get("full", {}), out["with"]["syncs"].get("freed", {})
    c.fig("ledger", {"full": full.get("used"), "freed": freed.get("used")})
    c.fig("driver", {"full": full.get("truth"), "freed": freed.get("truth")})
    if full.get("used") is not None:
        c.expect(full["used"] == ctx + (r.get("n") or 0) * BLOCK, "the ledger holds %s for a context and %s blocks" % (
            fmt_bytes(full["used"]), r.get("n")))
        c.expect(freed.get("used") == ctx, "after the frees the ledger holds %s, the context is %s" % (
            fmt_bytes(freed.get("used")), fmt_bytes(ctx)))
    if full.get("truth") is not None and full.get("used") is not None and h.nvml_names_pids:
        c.near(full["used"], full["truth"], max(16 * MiB, full["truth"] // 20), "charged vs the driver's figure")


if __name__ == "__main__":
    worker_main(work)
