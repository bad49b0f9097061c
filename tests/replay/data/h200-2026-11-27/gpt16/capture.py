
import argparse, json, os, statistics, threading, time
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
import torch.nn as nn
import torch.nn.functional as F

class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.c_attn, self.c_proj, self.n_head = nn.Linear(d, 3 * d), nn.Linear(d, d), heads
    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc, self.gelu, self.c_proj = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)
    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))

class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), CausalSelfAttention(d, heads)
        self.ln_2, self.mlp = nn.LayerNorm(d), MLP(d)
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

class GPT(nn.Module):
    def __init__(self, vocab, seq, layers, d, heads):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(seq, d),
            h=nn.ModuleList([Block(d, heads) for _ in range(layers)]), ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


import gzip, shutil, sys
p = argparse.ArgumentParser()
for name in ("layers", "hidden", "heads", "seq", "batch", "steps"):
    p.add_argument("--" + name, type=int, required=True)
p.add_argument("--device", default="cuda")
p.add_argument("mode", choices=("et", "snapshot", "prof"))
p.add_argument("out")
a = p.parse_args()
vocab, dev = 50304, torch.device(a.device)
cuda = dev.type == "cuda"
torch.manual_seed(1337)
for name in ("flash", "mem_efficient", "cudnn"):
    getattr(torch.backends.cuda, f"enable_{name}_sdp", lambda on: None)(False)
torch.backends.cuda.enable_math_sdp(True)
torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
torch.use_deterministic_algorithms(True, warn_only=True)
sync = torch.cuda.synchronize if cuda else (lambda: None)
model = GPT(vocab, a.seq, a.layers, a.hidden, a.heads).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
gen = torch.Generator().manual_seed(42)
def step():
    data = torch.randint(vocab, (a.batch, a.seq + 1), generator=gen).to(dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
        loss = model(data[:, :-1], data[:, 1:])
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); sync()
step(); step()  # warm-up: the optimizer's state, the allocator's pools
plain = a.out[:-3] if a.out.endswith(".gz") else a.out
if a.mode == "et":
    from torch.profiler import ExecutionTraceObserver
    et = ExecutionTraceObserver()
    et.register_callback(plain)
    et.start(); step(); et.stop(); et.unregister_callback()
elif a.mode == "snapshot":
    torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")
    step()
    torch.cuda.memory._dump_snapshot(plain)
    torch.cuda.memory._record_memory_history(enabled=None)
else:
    from torch.profiler import profile, ProfilerActivity
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        step()
    prof.export_chrome_trace(plain)
if plain != a.out:
    with open(plain, "rb") as f, gzip.open(a.out, "wb") as g:
        shutil.copyfileobj(f, g)
    os.unlink(plain)
print("captured", a.mode, os.path.getsize(a.out), flush=True)
