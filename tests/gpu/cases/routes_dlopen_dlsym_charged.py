"""A program that dlopens libcuda.so.1 and resolves 108 entry points with
dlsym (as frameworks do at load time), then allocates through the
cuMemAlloc_v2 it resolved: every name resolves, and its allocations are
charged and refused past the quota. Without the interceptor all of them
are allowed."""

from harness import MiB

NAME = "routes_dlopen_dlsym_charged"
PROVES = "dlopen + dlsym of the driver: every name resolves and allocations through it are held to the quota"
ORDER = 41
TIMEOUT = 60

S, N = 128 * MiB, 4


def run(h, c):
    ctx = h.ctx_cost()
    quota = ctx + 2 * S + 64 * MiB
    argv = ["--size", str(S), "--count", str(N)]
    rc, p, _ = h.run_probe(argv, h.env(), "bare", prog="dlopen_driver")
    res, summ = p.last("resolve"), p.last("summary")
    c.fig("without", {"resolve": res, "summary": summ, "missing": [d.get("symbol") for d in p.parsed("missing")]})
    c.expect(rc == 0 and summ.get("allowed") == str(N), "without the interceptor: %s" % p.tail())
    with h.session(quota) as s:
        rc, p, _ = h.run_probe(argv, s.env, "with", prog="dlopen_driver")
        res, summ = p.last("resolve"), p.last("summary")
        c.fig("with", {"resolve": res, "summary": summ, "missing": [d.get("symbol") for d in p.parsed("missing")]})
        c.expect(rc == 0, "the program ended %s; %s" % (p.status(), p.tail()))
        c.expect(res.get("missing") == "0", "names not resolved with the interceptor: %s" % res)
        c.expect(summ.get("allowed") == "2" and summ.get("denied") == "2",
                 "4 x 128 MiB under context + 320 MiB: %s, want 2 allowed, 2 denied" % summ)
        c.fig("peak_bytes", s.gpu()["peak_bytes"])
        c.expect(s.gpu()["peak_bytes"] >= 2 * S, "peak %s: the allocations were not charged" % s.gpu()["peak_bytes"])
