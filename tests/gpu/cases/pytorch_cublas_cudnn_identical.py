"""A cuBLAS matmul and a cuDNN convolution give bit-identical results with
and without the interceptor (deterministic algorithms, TF32 off, inputs
made on the CPU from a fixed seed): the interceptor changes what memory
queries answer, never what the libraries compute."""

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import GiB, worker_main  # noqa: E402

NAME = "pytorch_cublas_cudnn_identical"
PROVES = "a cuBLAS matmul and a cuDNN convolution give identical bytes with and without the interceptor"
ORDER = 74
TIMEOUT = 120


def digest(t):
    t = t.detach().contiguous().cpu()
    try:
        return hashlib.sha256(t.numpy().tobytes()).hexdigest()
    except Exception:  # no NumPy: the bytes through a uint8 view
        import torch
        return hashlib.sha256(bytes(t.view(torch.uint8).flatten().tolist())).hexdigest()


def work(args):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    g = torch.Generator().manual_seed(1234)
    a = torch.randn(2048, 2048, generator=g)
    b = torch.randn(2048, 2048, generator=g)
    x = torch.randn(8, 64, 56, 56, generator=g)
    conv = torch.nn.Conv2d(64, 128, 3, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=g))
        conv.bias.copy_(torch.randn(conv.bias.shape, generator=g))
        mm = a.cuda() @ b.cuda()
        y = conv.cuda()(x.cuda())
    torch.cuda.synchronize()
    res = {"matmul_sha256": digest(mm), "conv_sha256": digest(y), "cudnn_enabled": torch.backends.cudnn.enabled}
    res.update(fwork.torch_info(torch))
    return res


def run(h, c):
    h.need_module("torch")
    out = h.framework(c, __file__, [], h.ctx_cost() + 2 * GiB)
    bare = h.worker_ok(c, out["without"], "without")
    r = h.worker_ok(c, out["with"], "with")
    for k in ("matmul_sha256", "conv_sha256"):
        c.fig(k, {"without": bare.get(k), "with": r.get(k)})
        c.expect(bare.get(k) is not None and bare.get(k) == r.get(k), "%s differs: %s without, %s with" % (
            k, bare.get(k), r.get(k)))
    c.fig("cudnn", r.get("cudnn"))


if __name__ == "__main__":
    worker_main(work)
