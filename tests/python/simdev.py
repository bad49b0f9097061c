# SPDX-License-Identifier: MIT
# Device memory a block keeps for its backward, through the CUDA driver
# (cuda.bindings), on the simulated GPU: forward writes a pattern to fresh
# device memory, backward reads it back and checks it byte for byte, so the
# engine really moves memory under the Python side's control calls.
import sys

import torch


class Device:
    def __init__(self, mib):
        from cuda.bindings import driver as cu
        self.cu, self.bytes = cu, mib << 20
        self.check(cu.cuInit(0))
        dev = self.check(cu.cuDeviceGet(0))
        self.ctx = self.check(cu.cuDevicePrimaryCtxRetain(dev))
        self.check(cu.cuCtxSetCurrent(self.ctx))
        self.weights = self.check(cu.cuMemAlloc(4 << 20))  # the model "on the GPU" first

    def check(self, r):
        err, *rest = r if isinstance(r, tuple) else (r,)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA error {err}")
        return rest[0] if len(rest) == 1 else rest


class SavedOnDevice(torch.autograd.Function):
    """x passes through; dev.bytes of device memory, filled from tag, live until backward."""

    @staticmethod
    def forward(ctx, x, tag, dev):
        n = dev.bytes
        ptr = dev.check(dev.cu.cuMemAlloc(n))
        pattern = bytes([(tag * 7 + i) % 251 for i in range(256)]) * (n // 256)
        dev.check(dev.cu.cuMemcpyHtoD(ptr, pattern, n))
        ctx.ptr, ctx.pattern, ctx.dev = ptr, pattern, dev
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        dev, n = ctx.dev, len(ctx.pattern)
        back = bytearray(n)
        dev.check(dev.cu.cuMemcpyDtoH(back, ctx.ptr, n))
        dev.check(dev.cu.cuMemFree(ctx.ptr))
        if bytes(back) != ctx.pattern:
            print("DEVICE DATA CORRUPTED", file=sys.stderr)
            sys.exit(3)
        return g, None, None
