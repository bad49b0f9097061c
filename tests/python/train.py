# SPDX-License-Identifier: MIT
# A small nanoGPT-style training script, as a user would write it: it does not
# import aoshim. Run under LD_PRELOAD=libaoshim.so, aoshim finds its blocks.
# It trains on the CPU; with --sim each block also keeps a buffer of device
# memory (through cuda.bindings, on the simulated GPU) for its backward, so the
# engine really moves memory under the Python hooks.
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from simdev import Device, SavedOnDevice

p = argparse.ArgumentParser()
p.add_argument("--model", default="gpt", choices=["gpt", "llama", "two", "flat", "seq"])
p.add_argument("--layers", type=int, default=4)
p.add_argument("--hidden", type=int, default=32)
p.add_argument("--steps", type=int, default=2)
p.add_argument("--accum", type=int, default=1, help="microbatches per optimizer step")
p.add_argument("--ckpt", default="none", choices=["none", "reentrant", "nonreentrant"])
p.add_argument("--eval", action="store_true", help="an evaluation pass (no_grad) after each step")
p.add_argument("--explicit", action="store_true", help="call aoshim.torch.offload(blocks)")
p.add_argument("--keep", action="store_true", help="aoshim.keep() one tensor, print aoshim.stats()")
p.add_argument("--compile", default="none", choices=["none", "blocks", "model"],
               help="torch.compile each block, or the whole model")
p.add_argument("--ddp", action="store_true",
               help="DistributedDataParallel over gloo (run under torchrun)")
p.add_argument("--sim", type=int, default=0, metavar="MIB",
               help="each block keeps MIB MiB of device memory for its backward (simulated GPU)")
args = p.parse_args()

torch.manual_seed(0)
V, T, B, H = 64, 16, 2, args.hidden


# --- device memory per block (simdev.py), on the simulated GPU -------------------------------
dev = Device(args.sim) if args.sim else None


# --- models ------------------------------------------------------------------------------------
class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(H, 3 * H), nn.Linear(H, H)

    def forward(self, x):
        q, k, v = self.qkv(x).split(H, dim=2)
        q, k, v = (t.view(B, T, 4, H // 4).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, H))


class Block(nn.Module):  # GPT-2
    def __init__(self, i):
        super().__init__()
        self.i = i
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(H), Attention(), nn.LayerNorm(H)
        self.mlp = nn.Sequential(nn.Linear(H, 4 * H), nn.GELU(), nn.Linear(4 * H, H))

    def forward(self, x):
        if dev:
            x = SavedOnDevice.apply(x, self.i, dev)
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class LlamaMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.up, self.down = (nn.Linear(H, 2 * H, bias=False),
                                         nn.Linear(H, 2 * H, bias=False),
                                         nn.Linear(2 * H, H, bias=False))

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaDecoderLayer(nn.Module):  # returns a tuple, as Hugging Face's layers do
    def __init__(self, i):
        super().__init__()
        self.i = i
        self.input_layernorm, self.self_attn = RMSNorm(), Attention()
        self.post_attention_layernorm, self.mlp = RMSNorm(), LlamaMLP()

    def forward(self, hidden_states, attention_mask=None):
        if dev:
            hidden_states = SavedOnDevice.apply(hidden_states, self.i, dev)
        h = hidden_states + self.self_attn(self.input_layernorm(hidden_states))
        return (h + self.mlp(self.post_attention_layernorm(h)),)


def run_blocks(blocks, x, tuple_out=False):
    for b in blocks:
        if args.ckpt == "none":
            out = b(x) if not tuple_out else b(x, attention_mask=None)
        else:
            out = checkpoint(b, x, use_reentrant=args.ckpt == "reentrant")
        x = out[0] if tuple_out else out
    return x


class GPT(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, H), wpe=nn.Embedding(T, H),
            h=nn.ModuleList([Block(i) for i in range(n)]), ln_f=nn.LayerNorm(H)))
        self.lm_head = nn.Linear(H, V, bias=False)
        self.heads = nn.ModuleList([nn.Linear(H, H), nn.Linear(H, H)])  # leaves: not blocks

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(T))
        return self.lm_head(t.ln_f(run_blocks(t.h, x)))


class LlamaModel(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList([LlamaDecoderLayer(i) for i in range(n)])
        self.norm = RMSNorm()

    def forward(self, idx):
        return self.norm(run_blocks(self.layers, self.embed_tokens(idx), tuple_out=True))


class LlamaForCausalLM(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.model, self.lm_head = LlamaModel(n), nn.Linear(H, V, bias=False)

    def forward(self, idx):
        return self.lm_head(self.model(idx))


class TwoLists(nn.Module):  # an encoder and a decoder stack
    def __init__(self, n):
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.encoder = nn.ModuleList([Block(i) for i in range(n)])
        self.decoder = nn.ModuleList([Block(n + i) for i in range(n)])
        self.head = nn.Linear(H, V)

    def forward(self, idx):
        x = self.embed(idx)
        return self.head(run_blocks(self.decoder, run_blocks(self.encoder, x)))


class Flat(nn.Module):  # no repeated blocks
    def __init__(self, n):
        super().__init__()
        self.embed, self.l1, self.l2, self.head = (nn.Embedding(V, H), nn.Linear(H, 4 * H),
                                                    nn.Linear(4 * H, H), nn.Linear(H, V))

    def forward(self, idx):
        return self.head(self.l2(F.gelu(self.l1(self.embed(idx)))))


class SeqModel(nn.Module):  # the blocks in an nn.Sequential
    def __init__(self, n):
        super().__init__()
        self.embed, self.blocks = nn.Embedding(V, H), nn.Sequential(*[Block(i) for i in range(n)])
        self.head = nn.Linear(H, V)

    def forward(self, idx):
        return self.head(run_blocks(self.blocks, self.embed(idx)))


model = {"gpt": GPT, "llama": LlamaForCausalLM, "two": TwoLists, "flat": Flat,
         "seq": SeqModel}[args.model](args.layers)
if args.compile == "blocks":
    for i, b in enumerate(model.transformer.h):
        model.transformer.h[i] = torch.compile(b)
elif args.compile == "model":
    model = torch.compile(model)
if args.ddp:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
if args.explicit:
    import aoshim.torch
    aoshim.torch.offload(model.transformer.h)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(1)
losses = []
for step in range(args.steps):
    for mb in range(args.accum):
        idx = torch.randint(0, V, (B, T), generator=gen)
        tgt = torch.randint(0, V, (B, T), generator=gen)
        logits = model(idx)
        if args.keep and step == 0 and mb == 0:
            import aoshim
            print("keep", aoshim.keep(logits))
        loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1)) / args.accum
        loss.backward()
        losses.append(loss.item())
    opt.step()
    opt.zero_grad(set_to_none=True)
    if args.eval:
        with torch.no_grad():
            model(torch.randint(0, V, (B, T), generator=gen))
if args.keep:
    import aoshim
    print("stats", sorted(aoshim.stats()))
print("losses " + " ".join(x.hex() for x in losses))
if args.ddp:
    dist.destroy_process_group()
assert all(math.isfinite(x) for x in losses)
