"""JAX with its other allocators, XLA_PYTHON_CLIENT_ALLOCATOR=platform
(cuMemAlloc on demand, freed at once) and cuda_async (the driver's
stream-ordered pools), no preallocation: arrays of 256 MiB until the first
RESOURCE_EXHAUSTED under a quota of a context + 2 GiB, then freed and made
again; the worker's stderr holds the interceptor's line saying why, with
the quota. Without the interceptor every array is made."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import FrameworkSkip, GiB, MiB, fmt_bytes, sync, worker_main  # noqa: E402

NAME = "jax_allocators_platform_async"
PROVES = "JAX's platform and cuda_async allocators: RESOURCE_EXHAUSTED at the quota, memory reusable, the refusal line on stderr"
ORDER = 65
TIMEOUT = 200

BLOCK = 256 * MiB


def work(args):
    import jax
    import jax.numpy as jnp
    most = int(args[0])
    held, err = [], None
    while len(held) < most:
        try:
            a = jnp.zeros((BLOCK,), dtype=jnp.uint8)
            a.block_until_ready()
            held.append(a)
        except Exception as e:
            err = "%s: %s" % (type(e).__name__, str(e)[:300])
            break
    n = len(held)
    sync("full", n=n)
    for a in held:
        a.delete()
    held = []
    again = 0
    try:
        for _ in range(n):
            a = jnp.zeros((BLOCK,), dtype=jnp.uint8)
            a.block_until_ready()
            held.append(a)
            again += 1
    except Exception as e:
        err_again = str(e)[:200]
    else:
        err_again = None
    return {"n": n, "oom": err, "resource_exhausted": bool(err and "RESOURCE_EXHAUSTED" in err),
            "again": again, "again_error": err_again, "jax": jax.__version__,
            "platform": jax.devices()[0].platform}


def run(h, c):
    h.need_module("jax")
    quota = h.ctx_cost() + 2 * GiB
    most = quota // BLOCK + 4
    unsupported = []
    for alloc in ("platform", "cuda_async"):
        env = {"XLA_PYTHON_CLIENT_ALLOCATOR": alloc, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        out = h.framework(c, __file__, [str(most)], quota, env, timeout=80)
        why = h.unsupported(out)
        if why:
            c.fig(alloc, "fails without the interceptor too, so not tried: %s" % why)
            unsupported.append(alloc)
            continue
        bare = h.worker_ok(c, out["without"], alloc + " without")
        r = h.worker_ok(c, out["with"], alloc + " with")
        full = out["with"]["syncs"].get("full", {})
        c.fig(alloc, {"without_n": bare.get("n"), "without_oom": bare.get("oom"), "with_n": r.get("n"),
                      "with_oom": r.get("oom"), "again": r.get("again"), "ledger_full": full.get("used"),
                      "driver_full": full.get("truth"), "audit": out["with"].get("audit")})
        c.expect(r.get("platform") == "gpu", "%s: JAX runs on %s" % (alloc, r.get("platform")))
        c.expect(bare.get("n") == most, "%s without the interceptor: %s of %d arrays (%s)" % (
            alloc, bare.get("n"), most, bare.get("oom")))
        c.expect(r.get("resource_exhausted") is True, "%s: no RESOURCE_EXHAUSTED under %s (%s arrays; %s)" % (
            alloc, fmt_bytes(quota), r.get("n"), r.get("oom")))
        c.expect(r.get("again") == r.get("n"), "%s: %s of %s arrays made again after freeing (%s)" % (
            alloc, r.get("again"), r.get("n"), r.get("again_error")))
        fwork.refusal_expectations(c, out, quota)
        if full.get("used") is not None:
            c.expect(full["used"] <= quota, "%s: the ledger held %s, quota %s" % (alloc, fmt_bytes(full["used"]),
                                                                                   fmt_bytes(quota)))

    if len(unsupported) == 2:
        raise FrameworkSkip("this JAX offers neither allocator: %s" % c.figures)


if __name__ == "__main__":
    worker_main(work)
