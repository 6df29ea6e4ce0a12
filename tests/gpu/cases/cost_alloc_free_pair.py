"""What the interceptor adds to an allocation: a cuMemAlloc_v2 +
cuMemFree_v2 pair of 1 MiB by one thread, with and without the interceptor,
in interleaved rounds (median of each side's round medians, and their
ratio); the same pairs alternated in one process (alloc_bench --paired:
the interceptor's entry points against the driver's own); and the
throughput of 8 threads, with over without. Figures only: the verdict says
the measurement ran (every allocation succeeded), never how fast; the
targets (DESIGN.md: <= 1 % added per pair, >= 0.99 throughput with 8
threads, on a real GPU) are printed beside them."""

import json
import statistics

from harness import CaseError, MiB

NAME = "cost_alloc_free_pair"
PROVES = "the interceptor's added cost per alloc+free pair and on 8-thread throughput (figures; targets beside)"
ORDER = 65
TIMEOUT = 120

ROUNDS = 7


def bench(h, env, args, label):
    rc, p, _ = h.run_probe(args, env, label, prog="alloc_bench", timeout=60)
    if rc != 0 or not p.lines or not p.lines[-1].startswith("{"):
        raise CaseError("alloc_bench %s (%s): %s" % (" ".join(args), label, p.tail()))
    return json.loads(p.lines[-1])


def run(h, c):
    one = ["--threads", "1", "--iters", "20000", "--size", str(MiB)]
    eight = ["--threads", "8", "--ms", "300", "--size", str(MiB)]
    with h.session(h.ctx_cost() + 64 * MiB) as s:
        sides = {"without": h.env(), "with": s.env}
        ns = {"without": [], "with": []}
        for i in range(ROUNDS):
            for side in (("without", "with") if i % 2 == 0 else ("with", "without")):
                ns[side].append(bench(h, sides[side], one, side)["ns_per_pair_median"])
        a, b = statistics.median(ns["without"]), statistics.median(ns["with"])
        c.fig("ns_per_pair_without", round(a, 1))
        c.fig("ns_per_pair_with", round(b, 1))
        c.fig("ratio_with_over_without", round(b / a, 4))
        c.fig("added_ns_per_pair", round(b - a, 1))
        c.fig("added_percent", round(100 * (b - a) / a, 2))
        c.fig("rounds", ROUNDS)
        paired = bench(h, s.env, ["--paired", "--iters", "20000", "--size", str(MiB)], "paired")
        c.fig("paired_in_one_process", paired)
        control = bench(h, h.env(), ["--paired", "--iters", "20000", "--size", str(MiB)], "paired-control")
        c.fig("paired_control_without", control)
        tp = {"without": [], "with": []}
        for i in range(3):
            for side in (("without", "with") if i % 2 == 0 else ("with", "without")):
                tp[side].append(bench(h, sides[side], eight, side + "-8")["pairs_per_sec"])
        ratios = [w / o for w, o in zip(tp["with"], tp["without"]) if o]
        c.fig("throughput_8threads_pairs_per_sec", tp)
        c.fig("throughput_ratio_8threads", round(statistics.median(ratios), 4) if ratios else None)
        peak = c.fig("session_peak_bytes", s.gpu()["peak_bytes"])
        c.expect(peak >= MiB, "the runs 'with' the interceptor were never charged (peak %d): not measured" % peak)
        c.fig("targets", {"added_percent": "<= 1 (real GPU)", "throughput_ratio_8threads": ">= 0.99 (real GPU)"})
