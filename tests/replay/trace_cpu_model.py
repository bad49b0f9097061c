# SPDX-License-Identifier: MIT
"""Record one training step of a small Hugging Face LlamaForCausalLM on the CPU.

    python tests/replay/trace_cpu_model.py -o STEP.et.json.gz [--layers 4] [--hidden 256]

The model is built from a config with random weights (no download): RMSNorm,
rotary embeddings, SwiGLU MLP, SDPA attention, bf16 autocast, AdamW, and a
cross-entropy over the vocabulary at the end. Two warm-up steps run first (the
optimizer's state is created in the first), then the third step is recorded
with torch.profiler.ExecutionTraceObserver: forward, backward and the AdamW
step, as `aoshim-replay convert --et` reads it. Needs torch and transformers;
no GPU.
"""
import argparse
import gzip
import os
import shutil
import sys
import tempfile


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True, help="the execution trace to write (.json or .json.gz)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args(argv)

    import torch
    from torch.profiler import ExecutionTraceObserver
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1337)
    torch.set_num_threads(1)  # one op order, whatever the machine
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden,
                      intermediate_size=(8 * a.hidden // 3 + 15) // 16 * 16,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      num_key_value_heads=a.heads, max_position_embeddings=a.seq,
                      tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(42)

    def step():
        data = torch.randint(a.vocab, (a.batch, a.seq + 1), generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=data[:, :-1], labels=data[:, :-1])
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    step()
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "step.et.json")
        et = ExecutionTraceObserver()
        et.register_callback(raw)
        et.start()
        step()
        et.stop()
        et.unregister_callback()
        if a.out.endswith(".gz"):
            with open(raw, "rb") as f, gzip.GzipFile(a.out, "wb", compresslevel=9, mtime=0) as g:
                shutil.copyfileobj(f, g)
        else:
            shutil.copyfile(raw, a.out)
    print(f"trace_cpu_model: wrote {a.out} ({os.path.getsize(a.out)} bytes): LlamaForCausalLM, "
          f"{a.layers} layers, hidden {a.hidden}, seq {a.seq}, batch {a.batch}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
