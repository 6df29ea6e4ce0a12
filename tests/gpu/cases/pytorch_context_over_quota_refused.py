"""A quota smaller than a CUDA context, met through NVIDIA's runtime:
PyTorch's first CUDA tensor makes the runtime take the primary context
(context_over_quota_refused covers the driver API only). With the
interceptor the job gets a Python exception that says out of memory, not
a crash or a hang; the process goes on and exits normally and nothing
stays charged. Without it the same tensor is allocated."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import MiB, sync, worker_main  # noqa: E402

NAME = "pytorch_context_over_quota_refused"
PROVES = "PyTorch under a quota smaller than a context: a Python exception saying out of memory at the first tensor, no crash, nothing left charged"
ORDER = 63
TIMEOUT = 90


def work(args):
    import torch
    res = {"torch": torch.__version__}
    try:
        torch.zeros(1 << 20, device="cuda")
        torch.cuda.synchronize()
        res["first"] = "allocated"
    except Exception as e:  # what the job meets: reported, not raised
        res["first"] = "raised"
        res["raised_type"] = type(e).__name__
        res["raised_message"] = str(e)[:600]
    # the driver's figure for the process while it lives on
    sync("after_first")
    try:
        torch.zeros(1, device="cuda")
        res["second"] = "allocated"
    except Exception as e:
        res["second"] = type(e).__name__
    return res


def run(h, c):
    h.need_module("torch")
    ctx = h.ctx_cost()
    quota = max(ctx // 2, 16 * MiB)
    c.fig("quota_bytes", quota)
    c.fig("context_bytes", ctx)

    out = h.converse(h.worker(__file__, [], h.env(), "without"), None, 60)
    r = h.worker_ok(c, out, "without")
    c.fig("without", {k: r.get(k) for k in ("first", "second", "raised_type", "raised_message", "torch")})
    c.expect(r.get("first") == "allocated", "without the interceptor the first tensor was not allocated: %s" % (
        r.get("raised_message") or out.get("tail"),))

    with h.session(quota) as s:
        out = h.converse(h.worker(__file__, [], s.env, "with"), s, 60)
        r = h.worker_ok(c, out, "with")
        at = out["syncs"].get("after_first") or {}
        c.fig("with", {k: r.get(k) for k in ("first", "second", "raised_type", "raised_message")})
        c.fig("with_after_first", {k: at.get(k) for k in ("truth", "used")})
        c.fig("exit", out.get("status"))
        c.expect(r.get("first") == "raised",
                 "under a %d MiB quota (a context costs %d MiB) the first tensor was allocated" % (quota // MiB, ctx // MiB))
        msg = (r.get("raised_message") or "").lower()
        c.expect(r.get("first") != "raised" or "out of memory" in msg,
                 "the exception does not say out of memory: %s: %s" % (r.get("raised_type"), r.get("raised_message")))
        used, secs = s.wait_used(lambda u: u == 0, 10)
        c.expect(secs is not None, "%d bytes still charged after the refused process exited" % used)
        c.fig("denied", s.gpu()["denied"])


if __name__ == "__main__":
    worker_main(work)
