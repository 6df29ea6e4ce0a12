"""PyTorch with the default caching allocator: allocations of 256 MiB
until the first out-of-memory, under a quota of a context + 2 GiB, with
and without the interceptor. With it: torch.OutOfMemoryError near the
quota, torch.cuda.mem_get_info() gives the quota as the total, the ledger
and the driver's per-process figure stay within the quota, the memory is
allocated again after empty_cache(); the worker's stderr holds the
interceptor's line saying why, with the quota. Without it every block is
allowed."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fwork  # noqa: E402
from harness import worker_main  # noqa: E402

NAME = "pytorch_caching_allocator_oom"
PROVES = "PyTorch (the default caching allocator): OutOfMemoryError at the quota, mem_get_info total == quota, memory reusable after empty_cache, the refusal line on stderr"
ORDER = 70
TIMEOUT = 120

CONF = ""
THREADS = 0


def run(h, c):
    out, quota = fwork.torch_oom_case(h, c, __file__, CONF, THREADS)
    fwork.refusal_expectations(c, out, quota)


if __name__ == "__main__":
    worker_main(fwork.torch_oom)
