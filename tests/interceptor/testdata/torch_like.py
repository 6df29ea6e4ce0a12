"""What PyTorch's caching allocator does when the GPU is full, with ctypes:
blocks of the size asked (argv[1], MiB) until the driver refuses one, then
the same exception and message PyTorch raises (torch.OutOfMemoryError,
sized from cuMemGetInfo, which shows the quota inside a job)."""
import ctypes
import sys

MiB = 1 << 20


class OutOfMemoryError(RuntimeError):
    pass


OutOfMemoryError.__module__ = "torch"
OutOfMemoryError.__qualname__ = "OutOfMemoryError"


def check(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUDA error {r}")


def main():
    cuda = ctypes.CDLL("libcuda.so.1")
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    block = int(sys.argv[1]) * MiB
    held = []
    while True:
        p = ctypes.c_uint64()
        r = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(block))
        if r == 0:
            held.append(p.value)
            continue
        if r != 2:  # CUDA_ERROR_OUT_OF_MEMORY
            raise RuntimeError(f"cuMemAlloc_v2: CUDA error {r}")
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        print(f"held={len(held)} blocks", flush=True)
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {block / MiB:.2f} MiB. GPU 0 has a total capacity of "
            f"{total.value / MiB:.2f} MiB of which {free.value / MiB:.2f} MiB is free. Of the allocated memory "
            f"{len(held) * block / MiB:.2f} MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch "
            f"but unallocated.")


main()
