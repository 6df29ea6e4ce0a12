"""A program linked against a static CUDA runtime (no libcudart.so; the
runtime inside dlopens libcuda.so.1 and resolves the driver through
cuGetProcAddress_v2): its cudaMalloc calls are charged and refused past
the quota. The bundled program carries fakecuda's libcudart_static.a,
which reaches the driver the way NVIDIA's does; where NVIDIA's
libcudart_static.a is installed (CUDA_HOME, /usr/local/cuda) the same
source is also built against it with gcc and run."""

import glob
import os
import subprocess

from harness import MiB

NAME = "routes_static_runtime_charged"
PROVES = "a statically linked CUDA runtime's allocations are held to the quota"
ORDER = 42
TIMEOUT = 90

S, N = 128 * MiB, 4


def nvidia_static():
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"))
    for r in roots:
        for lib in ("lib64", "lib", "targets/x86_64-linux/lib"):
            p = os.path.join(r, lib, "libcudart_static.a") if r else ""
            if p and os.path.exists(p):
                return p
    return None


def build_nvidia(h, lib):
    src = os.path.join(h.bundle, "src")
    out = os.path.join(h.tmp, "static_runtime_nvidia")
    cmd = ["gcc", "-O2", "-std=gnu11", "-D_GNU_SOURCE", "-I", os.path.join(src, "include"), "-I", src,
           "-o", out, os.path.join(src, "static_runtime.c"), lib, "-ldl", "-lpthread", "-lrt", "-lstdc++"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    return (out, None) if p.returncode == 0 else (None, p.stdout[-800:])


def check(h, c, label, prog):
    quota = h.ctx_cost() + 2 * S + 64 * MiB
    argv = ["--step", str(S), "--count", str(N)]
    rc, p, _ = h.run_probe(argv, h.env(), "bare-" + label, prog=prog)
    summ = p.last("summary")
    r = {"without": summ, "start": p.last("start")}
    c.expect(rc == 0 and summ.get("allowed") == str(N), "%s without the interceptor: %s" % (label, p.tail()))
    with h.session(quota) as s:
        rc, p, _ = h.run_probe(argv, s.env, "with-" + label, prog=prog)
        summ = p.last("summary")
        r["with"] = summ
        r["copy"] = p.last("copy").get("status")
        c.expect(rc == 0, "%s: the program ended %s; %s" % (label, p.status(), p.tail()))
        c.expect(summ.get("allowed") == "2" and summ.get("denied") == "2",
                 "%s: 4 x 128 MiB under context + 320 MiB: %s, want 2 allowed, 2 denied" % (label, summ))
    c.fig(label, r)


def run(h, c):
    check(h, c, "bundled", "static_runtime")
    lib = nvidia_static()
    if lib is None:
        c.fig("nvidia_static_runtime", "not installed here (no libcudart_static.a under CUDA_HOME or /usr/local/cuda)")
        return
    prog, err = build_nvidia(h, lib)
    if prog is None:
        c.fig("nvidia_static_runtime", "%s: could not build against it: %s" % (lib, err))
        return
    c.fig("nvidia_static_runtime", lib)
    check(h, c, "nvidia", prog)
