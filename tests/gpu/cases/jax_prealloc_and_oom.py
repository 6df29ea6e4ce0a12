"""JAX/XLA on the GPU under a quota: it initialises (jaxlib >= 0.10 needs
the VMM attribute: "VMM is required for device memory allocation in XLA"),
preallocates about 75 % of the device's total, which inside the session
is the quota, and an array larger than the quota fails with
RESOURCE_EXHAUSTED. Without the interceptor the same program preallocates
75 % of the GPU and the same array is allocated."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import GiB, MiB, fmt_bytes, sync, worker_main  # noqa: E402

NAME = "jax_prealloc_and_oom"
PROVES = "JAX initialises (VMM), preallocates ~0.75 x quota, an oversized array gives RESOURCE_EXHAUSTED"
ORDER = 64
TIMEOUT = 150


def jax_info():
    import jax
    info = {"jax": jax.__version__}
    try:
        import jaxlib
        info["jaxlib"] = jaxlib.__version__
    except Exception:
        pass
    return info


def stats(dev):
    try:
        s = dev.memory_stats() or {}
        return {k: s.get(k) for k in ("bytes_limit", "bytes_in_use", "bytes_reserved", "pool_bytes") if k in s}
    except Exception as e:
        return {"error": str(e)[:200]}


def work(args):
    import jax
    import jax.numpy as jnp
    big = int(args[0])
    dev = jax.devices()[0]
    x = jnp.ones((1024, 1024), dtype=jnp.float32)
    x.block_until_ready()
    sync("initialised", platform=dev.platform, device=str(dev))
    res = {"platform": dev.platform, "stats_initialised": stats(dev)}
    try:
        y = jnp.ones((big,), dtype=jnp.uint8)
        y.block_until_ready()
        res["big"] = "allocated"
        del y
    except Exception as e:
        res["big"] = "%s: %s" % (type(e).__name__, str(e)[:300])
        res["resource_exhausted"] = "RESOURCE_EXHAUSTED" in str(e)
    z = (x @ x).sum()
    res["after"] = float(z)
    res.update(jax_info())
    return res


def run(h, c):
    h.need_module("jax")
    ctx = h.ctx_cost()
    quota = ctx + 4 * GiB
    big = quota + 512 * MiB
    c.fig("quota_bytes", quota)
    out = h.framework(c, __file__, [str(big)], quota, timeout=70)
    bare = h.worker_ok(c, out["without"], "without")
    r = h.worker_ok(c, out["with"], "with")
    c.fig("without", {k: bare.get(k) for k in ("platform", "big", "stats_initialised")})
    c.fig("with", {k: r.get(k) for k in ("platform", "big", "resource_exhausted", "stats_initialised", "jax", "jaxlib")})
    c.fig("audit", out["with"].get("audit"))
    c.expect(r.get("platform") == "gpu", "JAX runs on %s with the interceptor" % r.get("platform"))
    c.expect(bare.get("big") == "allocated", "without the interceptor %s: %s" % (fmt_bytes(big), bare.get("big")))
    c.expect(r.get("resource_exhausted") is True, "%s past the quota: %s" % (fmt_bytes(big), r.get("big")))
    c.expect(r.get("after") == 1024.0 ** 3, "a computation after the refusal gave %s" % r.get("after"))
    # what XLA decided from the total it saw (its BFC pool's limit), and
    # that the pool was taken: charged beyond the context at least that
    # much less 5 % (the charge also holds what the driver took for the
    # process beyond its context, so only the ledger's total bounds it
    # from above)
    limit = (r.get("stats_initialised") or {}).get("bytes_limit")
    if limit is not None:
        c.fig("pool_limit_fraction_of_quota", round(limit / quota, 3))
        c.expect(abs(limit - 0.75 * quota) <= 0.01 * quota,
                 "XLA's pool limit %s, 0.75 x quota %s expected" % (fmt_bytes(limit), fmt_bytes(int(0.75 * quota))))
    init = out["with"]["syncs"].get("initialised", {})
    if init.get("used") is not None:
        pre = c.fig("preallocated_charged", init["used"] - ctx)
        c.fig("preallocated_fraction_of_quota", round(pre / quota, 3))
        c.expect(pre >= 0.75 * quota - (0.05 * quota + 64 * MiB),
                 "charged %s beyond the context, a pool of about %s (0.75 x quota) expected" % (
                     fmt_bytes(pre), fmt_bytes(int(0.75 * quota))))
        c.expect(init["used"] <= quota, "the ledger holds %s, quota %s" % (fmt_bytes(init["used"]), fmt_bytes(quota)))
        if init.get("truth") is not None and h.nvml_names_pids:
            c.near(init["used"], init["truth"], max(64 * MiB, init["truth"] // 20),
                   "charged after preallocation vs the driver's figure")


if __name__ == "__main__":
    worker_main(work)
