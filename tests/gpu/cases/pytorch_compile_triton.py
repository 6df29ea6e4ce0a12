"""torch.compile (Inductor, Triton kernels) runs under a quota: a compiled
function gives the eager answer under the interceptor. Triton
loads its kernels through the driver (cuModuleLoadData, cuLaunchKernel)
and sizes nothing from memory queries, so this guards the parts of the
driver API the other cases do not touch."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, worker_main  # noqa: E402

NAME = "pytorch_compile_triton"
PROVES = "torch.compile (Triton) compiles and runs under a quota, same answer as eager"
ORDER = 90
TIMEOUT = 240


def work(args):
    import torch

    def f(x, y):
        return torch.nn.functional.gelu(x @ y) + torch.sin(x) * 0.5

    g = torch.Generator().manual_seed(7)
    x = torch.randn(1024, 1024, generator=g).cuda()
    y = torch.randn(1024, 1024, generator=g).cuda()
    t0 = time.monotonic()
    cf = torch.compile(f)
    out = cf(x, y)
    torch.cuda.synchronize()
    secs = time.monotonic() - t0
    ref = f(x, y)
    res = {"allclose": bool(torch.allclose(out, ref, rtol=1e-3, atol=1e-3)),
           "max_abs_diff": float((out - ref).abs().max()), "compile_and_first_run_s": round(secs, 2)}
    try:
        import triton
        res["triton"] = triton.__version__
    except ImportError:
        res["triton"] = None
    res.update(fwork.torch_info(torch))
    return res


def run(h, c):
    h.need_module("torch")
    h.need_module("triton")
    # with the interceptor only: the compiled function is checked against
    # eager in the same process (a run without took 15 s of the suite's
    # budget for a compile time figure)
    out = h.framework(c, __file__, [], h.ctx_cost() + 2 * GiB, timeout=110, sides=("with",))
    r = h.worker_ok(c, out["with"], "with")
    c.fig("with", {k: r.get(k) for k in ("allclose", "max_abs_diff", "compile_and_first_run_s", "triton")})
    c.expect(r.get("allclose") is True, "the compiled function's answer differs from eager under the interceptor: %s" % (
        r.get("max_abs_diff"),))


if __name__ == "__main__":
    worker_main(work)
