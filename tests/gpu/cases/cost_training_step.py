"""One training step of a small transformer (torch.nn.TransformerEncoder,
6 layers, d_model 512, built from its configuration with random weights:
nothing is downloaded), with and without the interceptor, and the ratio.
Four processes start at once, two outside any session and two each in a
session of its own (the quota the case had with one process a side); each builds the model and warms up, then they take turns, one at
a time on the GPU, timing STEPS steps per turn for ROUNDS rounds in an
order that rotates every round (without/with/with/without, then with/
without/without/with, ...). So the figures come from the same processes
through the same stretch of time, the GPU's clocks drifting alike for both
sides, and the processes' start-up (importing PyTorch, the model, the
warm-up: seconds) is paid once, side by side. Figures only; DESIGN.md's
target is <= 0.5 % added on a real GPU."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, CaseError, sync, worker_main  # noqa: E402

NAME = "cost_training_step"
PROVES = "a small transformer's training step with and without the interceptor (figures; target beside)"
ORDER = 67
TIMEOUT = 240

ROUNDS = 6
STEPS = 10
WARMUP = 10
START_S = 120  # a worker's start-up: PyTorch imported, the model built and warmed up


def work(args):
    """Build, warm up, then for each round wait for the case's turn and
    time STEPS steps; report each step's milliseconds per round."""
    rounds, steps = int(args[0]), int(args[1])
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

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    per_round = []
    for r in range(rounds):
        sync("round%d" % r)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1000)
        per_round.append(times)
    sync("done")
    res = {"step_ms": per_round, "peak_allocated": torch.cuda.max_memory_allocated()}
    res.update(fwork.torch_info(torch))
    return res


def order(r, names):
    """Round r's turn order: the names rotated by r, reversed every other
    round, so each process takes each place in turn."""
    k = r % len(names)
    o = names[k:] + names[:k]
    return o if r % 2 == 0 else o[::-1]


def run(h, c):
    h.need_module("torch")
    quota = h.ctx_cost() + 4 * GiB
    args = [str(ROUNDS), str(STEPS)]
    with h.session(quota) as s0, h.session(quota) as s1:
        procs = {}
        for name, env in (("without-0", h.env()), ("with-0", s0.env), ("with-1", s1.env), ("without-1", h.env())):
            procs[name] = h.worker(__file__, args, env, name)
        names = list(procs)
        for p in procs.values():
            p.until("sync", timeout=START_S, at="round0")
        for r in range(ROUNDS):
            nxt = "round%d" % (r + 1) if r + 1 < ROUNDS else "done"
            for name in order(r, names):
                p = procs[name]
                p.cont()  # its turn: the others wait at their sync
                p.until("sync", timeout=60, at=nxt)
        used = [s0.used(), s1.used()]  # all four hold their memory at 'done'
        results = {}
        for name, p in procs.items():
            p.cont()
            d = p.until("result", timeout=60)
            rc = p.wait(30)
            r = {k: v for k, v in d.items() if k not in ("_", "event")}
            if rc != 0 or "error" in r:
                raise CaseError("%s ended %s: %s" % (name, p.status(), r.get("error") or p.tail()))
            results[name] = r
    c.expect(min(used) > 0, "a session's process was never charged (used %s)" % used)
    side_of = {n: n.split("-")[0] for n in names}
    # each round's median step per side, then the ratio within each round
    med = {"without": [], "with": []}
    for r in range(ROUNDS):
        for side in med:
            ms = [t for n in names if side_of[n] == side for t in results[n]["step_ms"][r]]
            med[side].append(round(statistics.median(ms), 3))
    c.fig("step_ms_median_per_round", med)
    c.fig("used_bytes_while_running", used)
    ratios = [b / a for a, b in zip(med["without"], med["with"])]
    a = statistics.median([t for n in names if side_of[n] == "without" for rr in results[n]["step_ms"] for t in rr])
    b = statistics.median([t for n in names if side_of[n] == "with" for rr in results[n]["step_ms"] for t in rr])
    c.fig("step_ms", {"without": round(a, 3), "with": round(b, 3)})
    c.fig("ratio_with_over_without", round(statistics.median(ratios), 4))
    c.fig("added_percent", round(100 * (statistics.median(ratios) - 1), 2))
    c.fig("added_percent_per_round", [round(100 * (x - 1), 2) for x in ratios])
    c.fig("processes", {"without": 2, "with": 2, "rounds": ROUNDS, "steps_per_turn": STEPS})
    info = results[names[1]]
    c.fig("torch", {k: info.get(k) for k in ("torch", "torch_cuda", "device", "cudnn", "peak_allocated")})
    c.fig("target", "<= 0.5 % added (real GPU)")


if __name__ == "__main__":
    worker_main(work)
