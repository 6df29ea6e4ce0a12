"""One training step of a small transformer (torch.nn.TransformerEncoder,
6 layers, d_model 512, built from its configuration with random weights:
nothing is downloaded), with and without the interceptor: the median step
time of 40 steps after 10 warm-up steps, in processes alternated
without/with/with/without, and the ratio. Figures only; DESIGN.md's
target is <= 0.5 % added on a real GPU."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, worker_main  # noqa: E402

NAME = "cost_training_step"
PROVES = "a small transformer's training step with and without the interceptor (figures; target beside)"
ORDER = 63
TIMEOUT = 240


def work(args):
    import torch
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(16, 256, 512, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(40):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
    res = {"step_ms_median": statistics.median(times), "steps": len(times),
           "peak_allocated": torch.cuda.max_memory_allocated()}
    res.update(fwork.torch_info(torch))
    return res


def run(h, c):
    h.need_module("torch")
    quota = h.ctx_cost() + 4 * GiB
    ms = {"without": [], "with": []}
    for order in (("without", "with"), ("with", "without")):
        out = h.framework(c, __file__, [], quota, sides=order, timeout=100)
        for side in order:
            r = h.worker_ok(c, out[side], side)
            if r.get("step_ms_median") is not None:
                ms[side].append(r["step_ms_median"])
    c.fig("step_ms", ms)
    if ms["without"] and ms["with"]:
        a, b = statistics.median(ms["without"]), statistics.median(ms["with"])
        c.fig("ratio_with_over_without", round(b / a, 4))
        c.fig("added_percent", round(100 * (b - a) / a, 2))
    c.fig("target", "<= 0.5 % added (real GPU)")


if __name__ == "__main__":
    worker_main(work)
