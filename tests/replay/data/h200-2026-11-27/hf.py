# A Hugging Face causal LM built from a config, unmodified, trained a few
# steps (bf16 autocast, AdamW, fixed seeds and data): the device's memory
# (total minus free, sampled by a thread every millisecond) per step, the
# losses' bits, the step times (mode train); or its third step captured by
# one of PyTorch's recorders (mode et: execution trace, snapshot: allocator
# history, prof: profiler trace).
import argparse, gzip, json, os, shutil, statistics, threading, time
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
import transformers as tf

p = argparse.ArgumentParser()
p.add_argument("--arch", choices=("llama", "gpt2", "qwen2"), default="llama")
p.add_argument("--layers", type=int, default=8)
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--steps", type=int, default=8)
p.add_argument("--device", default="cuda")
p.add_argument("--mode", choices=("train", "et", "snapshot", "prof"), default="train")
p.add_argument("--out", help="the capture's file (modes et, snapshot, prof)")
a = p.parse_args()
dev = torch.device(a.device)
cuda = dev.type == "cuda"
torch.manual_seed(1337)
torch.use_deterministic_algorithms(True, warn_only=True)
h, vocab = a.hidden, 32000
if a.arch == "gpt2":
    vocab = 50257
    cfg = tf.GPT2Config(vocab_size=vocab, n_positions=a.seq, n_embd=h, n_layer=a.layers,
                        n_head=h // 128, attn_implementation="eager")
    model_cls = tf.GPT2LMHeadModel
elif a.arch == "qwen2":
    cfg = tf.Qwen2Config(vocab_size=vocab, hidden_size=h, intermediate_size=h * 8 // 3,
                         num_hidden_layers=a.layers, num_attention_heads=h // 128,
                         num_key_value_heads=max(1, h // 512), max_position_embeddings=a.seq,
                         tie_word_embeddings=False, attn_implementation="eager")
    model_cls = tf.Qwen2ForCausalLM
else:
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=h, intermediate_size=h * 8 // 3,
                         num_hidden_layers=a.layers, num_attention_heads=h // 128,
                         num_key_value_heads=h // 128, max_position_embeddings=a.seq,
                         attn_implementation="eager")
    model_cls = tf.LlamaForCausalLM
model = model_cls(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
gen = torch.Generator().manual_seed(42)
sync = torch.cuda.synchronize if cuda else (lambda: None)


def step():
    ids = torch.randint(vocab, (a.batch, a.seq), generator=gen).to(dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync()
    return loss


if a.mode != "train":
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
    raise SystemExit(0)

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
out = dict(arch=a.arch, losses=[], step_s=[])
for i in range(a.steps):
    if cuda:
        sample()
    where[0] = i
    t0 = time.perf_counter()
    loss = step()
    if cuda:
        sample()
    out["step_s"].append(time.perf_counter() - t0)
    out["losses"].append(loss.item().hex())
    print(f"step {i} loss {float.fromhex(out['losses'][-1])!r} {out['step_s'][-1] * 1e3:.1f} ms", flush=True)
if cuda:
    done.set()
    th.join()
    out["device_peak_steps"] = [peaks.get(i, 0) for i in range(a.steps)]
    out["device_base"] = base[1] - base[0]
    out["device_total"] = base[1]
out["median_s"] = statistics.median(out["step_s"][2:] or out["step_s"])
print("HF_RESULT " + json.dumps(out), flush=True)
