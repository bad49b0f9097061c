# SPDX-License-Identifier: MIT
# A small pipeline-parallel training script, as a user would write it with
# torch.distributed.pipelining: it does not import aoshim. Run under torchrun
# with two CPU ranks (gloo). Every rank builds the whole model from one seed
# and keeps its own stages: one per rank (GPipe, 1F1B), or two per rank
# (interleaved 1F1B: rank r holds stages r and r + 2). Each stage module has
# an nn.ModuleList of blocks, which aoshim finds by itself. With --sim each
# block also keeps a buffer of device memory (through cuda.bindings, on the
# simulated GPU) for its backward, as train.py --sim does.
import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B)

p = argparse.ArgumentParser()
p.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved"])
p.add_argument("--microbatches", type=int, default=4)
p.add_argument("--blocks", type=int, default=2, help="blocks per stage")
p.add_argument("--steps", type=int, default=2)
p.add_argument("--free-outputs", action="store_true",
               help="Megatron-style: replace a stage output's storage by an empty one once sent")
p.add_argument("--sim", type=int, default=0, metavar="MIB",
               help="each block keeps MIB MiB of device memory for its backward (simulated GPU)")
args = p.parse_args()

V, T, MB, H = 64, 16, 2, 32  # vocabulary, sequence, microbatch size, hidden

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
per_rank = 2 if args.schedule == "interleaved" else 1
n_stages = world * per_rank


class Device:
    def __init__(self):
        from cuda.bindings import driver as cu
        self.cu = cu
        self.check(cu.cuInit(0))
        self.ctx = self.check(cu.cuDevicePrimaryCtxRetain(self.check(cu.cuDeviceGet(0))))
        self.check(cu.cuCtxSetCurrent(self.ctx))

    def check(self, r):
        err, *rest = r
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA error {err}")
        return rest[0] if len(rest) == 1 else rest


class SavedOnDevice(torch.autograd.Function):
    """Forward writes a pattern to fresh device memory; backward reads it back and checks it."""

    @staticmethod
    def forward(ctx, x, tag):
        n = args.sim << 20
        ctx.ptr = dev.check(dev.cu.cuMemAlloc(n))
        ctx.pattern = bytes([(tag * 7 + i) % 251 for i in range(256)]) * (n // 256)
        dev.check(dev.cu.cuMemcpyHtoD(ctx.ptr, ctx.pattern, n))
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        back = bytearray(len(ctx.pattern))
        dev.check(dev.cu.cuMemcpyDtoH(back, ctx.ptr, len(back)))
        dev.check(dev.cu.cuMemFree(ctx.ptr))
        if bytes(back) != ctx.pattern:
            raise SystemExit("DEVICE DATA CORRUPTED")
        return g, None


dev = Device() if args.sim else None


class Block(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.i = i
        self.ln_1, self.ln_2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.attn = nn.MultiheadAttention(H, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(H, 4 * H), nn.GELU(), nn.Linear(4 * H, H))

    def forward(self, x):
        if dev:
            x = SavedOnDevice.apply(x, self.i)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class Stage(nn.Module):
    """One pipeline stage: the embedding on the first, the head on the last."""

    def __init__(self, index, blocks):
        super().__init__()
        self.embed = nn.Embedding(V, H) if index == 0 else None
        self.layers = nn.ModuleList(blocks)
        last = index == n_stages - 1
        self.norm, self.head = (nn.LayerNorm(H), nn.Linear(H, V)) if last else (None, None)

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.layers:
            x = block(x)
        return self.head(self.norm(x)) if self.head is not None else x


# The whole model on every rank, from one seed: the same weights whatever the split.
torch.manual_seed(0)
blocks = [Block(i) for i in range(n_stages * args.blocks)]
stages_all = [Stage(i, blocks[i * args.blocks:(i + 1) * args.blocks]) for i in range(n_stages)]
mine = [i for i in range(n_stages) if i % world == rank]
stages = [PipelineStage(stages_all[i], i, n_stages, torch.device("cpu")) for i in mine]

freed = 0
if args.free_outputs:
    # Megatron's deallocate_output_tensor: once a stage output is sent, only
    # its autograd node is needed for backward, so its storage is replaced by
    # a one-element tensor. torch calls release_fwd_send_outputs then.
    def freeing(stage):
        release = stage.release_fwd_send_outputs

        def release_and_free(chunk):
            state = stage._forward_chunk_states.get(chunk)
            for out, pending, ok in (zip(state.live_outputs, state.send_pending, state.releasable)
                                     if state else ()):
                if pending and ok:
                    out.data = torch.empty((1,), dtype=out.dtype, device=out.device)
                    global freed
                    freed += 1
            release(chunk)

        stage.release_fwd_send_outputs = release_and_free

    for s in stages:
        freeing(s)


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))


n = args.microbatches
if args.schedule == "gpipe":
    sched = ScheduleGPipe(stages[0], n, loss_fn=loss_fn)
elif args.schedule == "1f1b":
    sched = Schedule1F1B(stages[0], n, loss_fn=loss_fn)
else:
    sched = ScheduleInterleaved1F1B(stages, n, loss_fn=loss_fn)

params = [q for s in stages for q in s.submod.parameters()]
opt = torch.optim.AdamW(params, lr=1e-2)
gen = torch.Generator().manual_seed(1)
losses = []
for step in range(args.steps):
    idx = torch.randint(0, V, (n * MB, T), generator=gen)
    tgt = torch.randint(0, V, (n * MB, T), generator=gen)
    mb_losses = []
    if 0 in mine:
        sched.step(idx, target=tgt, losses=mb_losses)
    else:
        sched.step(target=tgt, losses=mb_losses)
    losses += [x.item() for x in mb_losses]
    opt.step()
    opt.zero_grad(set_to_none=True)

# What the schedule says this rank runs (F/B, stage, microbatch), for the test to check.
order = sched.pipeline_order[rank] if sched.pipeline_order else []
print(f"order {rank} " + " ".join(str(a) for a in order if a is not None), flush=True)
if args.free_outputs:
    print(f"freed {rank} {freed}", flush=True)
if n_stages - 1 in mine:
    print(f"losses {rank} " + " ".join(x.hex() for x in losses), flush=True)
    assert all(math.isfinite(x) for x in losses)
dist.destroy_process_group()
