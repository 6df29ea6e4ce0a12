"""Workloads the framework cases share, run inside their worker processes
(never in the runner, which must not load CUDA). Each returns the dict
the worker reports as its result; sync() points let the case read the
driver's figures while the worker holds its memory.
"""

import re

from harness import MiB, sync


def torch_info(torch):
    info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0)}
    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:  # no cuDNN in this build
        info["cudnn"] = "n/a (%s)" % e
    return info


def _err(e):
    return {"type": type(e).__name__, "message": str(e)[:400]}


def torch_oom(args):
    """args: block MiB, most blocks, threads (0: the main thread). Allocate
    blocks (from worker threads with no current context when threads > 0)
    until the first out-of-memory or the most; empty the cache; allocate as
    many again (memory reusable)."""
    import torch
    block, most, threads = int(args[0]) * MiB, int(args[1]), int(args[2])
    torch.zeros(1, device="cuda")
    free, total = torch.cuda.mem_get_info()
    sync("ready", free=free, total=total)
    held, oom = [], None

    def one():
        return torch.empty(block, dtype=torch.uint8, device="cuda")

    if threads:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(threads) as ex:
            while len(held) < most and oom is None:
                futs = [ex.submit(one) for _ in range(min(threads, most - len(held)))]
                for f in futs:
                    try:
                        held.append(f.result())
                    except Exception as e:  # torch.OutOfMemoryError, or what went wrong instead
                        oom = e
                # the futures hold their tensors: only `held` may keep them
                futs = None
    else:
        while len(held) < most:
            try:
                held.append(one())
            except Exception as e:
                oom = e
                break
    torch.cuda.synchronize()
    n_ok = len(held)
    torch_oom_error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    res = {"n_ok": n_ok, "most": most, "oom": _err(oom) if oom else None,
           "oom_is_torch_oom": isinstance(oom, torch_oom_error) if oom else None,
           "mem_get_info": [free, total], "reserved_full": torch.cuda.memory_reserved()}
    try:
        segs = torch.cuda.memory_snapshot()
        res["segments"] = len(segs)
        res["expandable_segments"] = sum(1 for s in segs if s.get("is_expandable"))
    except Exception as e:
        res["segments"] = "n/a (%s)" % e
    sync("full", n_ok=n_ok)
    del held[:]
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    res["reserved_emptied"] = torch.cuda.memory_reserved()
    sync("emptied")
    try:
        again = [one() for _ in range(n_ok)]
        torch.cuda.synchronize()
        res["n_again"] = len(again)
        del again
    except Exception as e:
        res["n_again"] = None
        res["again_error"] = _err(e)
    torch.cuda.empty_cache()
    res.update(torch_info(torch))
    return res


def oom_expectations(h, c, out, quota, block, most):
    """What a framework's out-of-memory workload must show: without the
    interceptor every block allowed; with it, refused with the framework's
    out-of-memory error near the quota, the framework told the quota as the
    device's total, the ledger and the driver within the quota while full,
    the memory reusable after the cache is emptied."""
    from harness import fmt_bytes
    bare = h.worker_ok(c, out["without"], "without")
    c.fig("without", {k: bare.get(k) for k in ("n_ok", "oom", "mem_get_info")})
    c.expect(bare.get("n_ok") == most, "without the interceptor %s of %d blocks were allocated (%s)" % (
        bare.get("n_ok"), most, bare.get("oom")))
    w = out["with"]
    r = h.worker_ok(c, w, "with")
    full = w["syncs"].get("full", {})
    c.fig("with", {k: r.get(k) for k in ("n_ok", "oom", "oom_is_torch_oom", "mem_get_info", "reserved_full",
                                         "reserved_emptied", "n_again", "segments", "expandable_segments")})
    c.fig("with_full", {"ledger_used": full.get("used"), "driver": full.get("truth")})
    c.fig("with_emptied", {k: w["syncs"].get("emptied", {}).get(k) for k in ("used", "truth")})
    c.fig("audit", w.get("audit"))
    if not r:
        return r
    c.expect(r.get("oom") is not None, "no out-of-memory error under a %s quota (%s blocks of %s allocated)" % (
        fmt_bytes(quota), r.get("n_ok"), fmt_bytes(block)))
    c.expect(r.get("oom") is None or r.get("oom_is_torch_oom"), "the allocation past the quota raised %s, not "
             "torch.OutOfMemoryError" % (r.get("oom"),))
    mgi = r.get("mem_get_info") or [None, None]
    c.expect(mgi[1] == quota, "the framework sees a device of %s, the quota is %s" % (fmt_bytes(mgi[1]), fmt_bytes(quota)))
    ctx = h.ctx_cost()
    c.expect((r.get("n_ok") or 0) * block <= quota, "%d blocks of %s held under %s" % (
        r.get("n_ok") or 0, fmt_bytes(block), fmt_bytes(quota)))
    c.expect((r.get("n_ok") or 0) >= (quota - ctx) // block - 3, "only %s blocks of %s under %s (context %s)" % (
        r.get("n_ok"), fmt_bytes(block), fmt_bytes(quota), fmt_bytes(ctx)))
    if full.get("used") is not None:
        c.expect(full["used"] <= quota, "the ledger held %s, quota %s" % (fmt_bytes(full["used"]), fmt_bytes(quota)))
    if full.get("truth") is not None and h.nvml_names_pids:
        c.expect(full["truth"] <= quota + 32 * MiB, "the driver counts %s for the process, quota %s" % (
            fmt_bytes(full["truth"]), fmt_bytes(quota)))
    c.expect(r.get("n_again") == r.get("n_ok"), "after empty_cache %s of %s blocks could be allocated again (%s)" % (
        r.get("n_again"), r.get("n_ok"), r.get("again_error")))
    return r



def torch_oom_case(h, c, case_file, conf, threads, block=256 * MiB):
    """The PyTorch out-of-memory case of one allocator configuration
    (PYTORCH_CUDA_ALLOC_CONF=conf, allocating from `threads` worker threads
    when non-zero): blocks of `block` until the first out-of-memory under a
    quota of a context + 2 GiB, with and without the interceptor
    (oom_expectations)."""
    from harness import GiB
    h.need_module("torch")
    quota = h.ctx_cost() + 2 * GiB
    most = (quota // block) + 4
    c.fig("quota_bytes", quota)
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
    out = h.framework(c, case_file, [str(block // MiB), str(most), str(threads)], quota, env)
    r = oom_expectations(h, c, out, quota, block, most)
    if conf.startswith("expandable"):
        c.expect(r.get("expandable_segments"), "no expandable segment in torch.cuda.memory_snapshot(): %s" % (
            r.get("segments"),))
    return out, quota


# The interceptor's line when the quota refuses (docs/interceptor.md "When
# the quota refuses").
REFUSAL_LINE = re.compile(r"^gpuslice: (?:job|session) (\S+): an allocation of (\S+) on GPU (\d+) was refused: "
                          r"the job holds (\S+) of its (\S+) quota on that GPU \(([^)]*)\)\. "
                          r"CUDA reports out of memory\. More: gpuslice status \S+")


def size_text(b):
    """A size as gpuslice writes it: 8GiB, 2.5GiB, 300MiB, 100B."""
    for name, v in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= v:
            whole, rem = divmod(b, v)
            if rem == 0:
                return "%d%s" % (whole, name)
            tenth = (rem * 10 + v // 2) // v
            return "%d.%d%s" % (whole + (tenth == 10), 0 if tenth == 10 else tenth, name)
    return "%dB" % b


def refusal_expectations(c, out, quota, side="with"):
    """The framework met the quota: the worker's stderr says so in the
    interceptor's line (at least one, at most five per process) naming the
    quota; nothing of the kind without the interceptor."""
    lines = [l for l in out[side].get("stderr", "").splitlines() if REFUSAL_LINE.match(l)]
    bare = [l for l in out["without"].get("stderr", "").splitlines() if l.startswith("gpuslice: ")]
    c.fig(side + "_refusal_lines", lines[:2] + (["... %d in all" % len(lines)] if len(lines) > 2 else []))
    c.expect(1 <= len(lines) <= 5, "%s: %d refusal lines on the worker's stderr, want 1 to 5: %s" % (
        side, len(lines), out[side].get("stderr", "")[-600:]))
    if lines:
        got = REFUSAL_LINE.match(lines[0]).group(5)
        c.expect(got == size_text(quota), "%s: the refusal line names a quota of %s, the quota is %s" % (
            side, got, size_text(quota)))
    c.expect(not bare, "without the interceptor the worker printed %s" % bare[:1])
