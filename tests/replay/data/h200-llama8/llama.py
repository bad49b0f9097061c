# A Hugging Face Llama, unmodified, trained a few steps: the device's memory
# (total minus free, sampled by a thread) per step, the losses' bits, the
# step times. Run without aoshim, under AOSHIM_ENABLE=0 + AOSHIM_RECORD (a
# trace), and under AOSHIM_OFFLOAD_LAYERS=all.
import argparse, json, os, statistics, threading, time
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=8)
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--steps", type=int, default=8)
p.add_argument("--device", default="cuda")
a = p.parse_args()
dev = torch.device(a.device)
cuda = dev.type == "cuda"
torch.manual_seed(1337)
torch.use_deterministic_algorithms(True, warn_only=True)
cfg = LlamaConfig(vocab_size=32000, hidden_size=a.hidden, intermediate_size=a.hidden * 8 // 3,
                  num_hidden_layers=a.layers, num_attention_heads=a.hidden // 128,
                  num_key_value_heads=a.hidden // 128, max_position_embeddings=a.seq,
                  attn_implementation="eager")
model = LlamaForCausalLM(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
gen = torch.Generator().manual_seed(42)
peaks, where = {}, [-1]
done = threading.Event()


def sample():
    free, total = torch.cuda.mem_get_info(dev)
    k = where[0]
    peaks[k] = max(peaks.get(k, 0), total - free)


def loop():
    torch.cuda.set_device(dev.index or 0)
    while not done.is_set():
        sample()
        time.sleep(0.001)


if cuda:
    base = torch.cuda.mem_get_info(dev)
    th = threading.Thread(target=loop, daemon=True)
    th.start()
out = dict(losses=[], step_s=[])
for step in range(a.steps):
    ids = torch.randint(32000, (a.batch, a.seq), generator=gen).to(dev)
    if cuda:
        torch.cuda.synchronize()
        sample()
    where[0] = step
    t0 = time.perf_counter()
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
        sample()
    out["step_s"].append(time.perf_counter() - t0)
    out["losses"].append(loss.item().hex())
    print(f"step {step} loss {float.fromhex(out['losses'][-1])!r} {out['step_s'][-1] * 1e3:.1f} ms", flush=True)
if cuda:
    done.set()
    th.join()
    out["device_peak_steps"] = [peaks.get(i, 0) for i in range(a.steps)]
    out["device_base"] = base[1] - base[0]
out["median_s"] = statistics.median(out["step_s"][2:] or out["step_s"])
print("LLAMA_RESULT " + json.dumps(out), flush=True)
