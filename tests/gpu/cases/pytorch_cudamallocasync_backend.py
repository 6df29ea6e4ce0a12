"""PyTorch with backend:cudaMallocAsync (the driver's stream-ordered pools): allocations of 256 MiB
until the first out-of-memory, under a quota of a context + 2 GiB, with
and without the interceptor. With it: torch.OutOfMemoryError near the
quota, torch.cuda.mem_get_info() gives the quota as the total, the ledger
and the driver's per-process figure stay within the quota, the memory is
allocated again after empty_cache(). Without it every block is allowed."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import worker_main  # noqa: E402

NAME = "pytorch_cudamallocasync_backend"
PROVES = "PyTorch (backend:cudaMallocAsync (the driver's stream-ordered pools)): OutOfMemoryError at the quota, mem_get_info total == quota, memory reusable after empty_cache"
ORDER = 72
TIMEOUT = 120

CONF = "backend:cudaMallocAsync"
THREADS = 0


def run(h, c):
    fwork.torch_oom_case(h, c, __file__, CONF, THREADS)


if __name__ == "__main__":
    worker_main(fwork.torch_oom)
