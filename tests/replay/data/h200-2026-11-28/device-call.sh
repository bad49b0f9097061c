#!/bin/bash
# One device call (2026-11-28), the library at this commit: gpu-check's full
# verdict (with its new run under the budget the link hides), then the
# Hugging Face Llama 8x2048 and GPT-2 12x1536 of 2026-11-27 without aoshim,
# under the budget the link hides and 25% of the activations under (the
# bytes the replay's bench moves for them, taken off this run's device peak)
# and under all; then a model the replay has not seen, a Qwen2 12x2048
# (grouped-query attention), recorded without aoshim (AOSHIM_ENABLE=0) and
# run under the budget the link hides (55 GB/s for a third of its step);
# between them, gpu-check's GPT at the shared step's shape (24x2048, seq 2048,
# batch 1, peak in the optimizer) without aoshim, under auto and under all.
export PYTHONUNBUFFERED=1
T0=$SECONDS
PY=$(command -v python3)
export PATH="$(dirname "$PY"):$PATH"
R=/tmp/rec; mkdir -p $R
{ nvidia-smi; uname -a; $PY -c 'import torch,transformers;print(torch.__version__, torch.version.cuda, transformers.__version__)'; } > $R/env.txt 2>&1
pack() {
  gzip -9 $R/*.report.json $R/*.timeline.json 2>/dev/null
  cd /tmp && tar czf $OUT/rec.tgz rec
  ls -la $OUT; echo "total $((SECONDS - T0)) s"
}
trap pack EXIT
set -o pipefail
timeout 290 $PY scripts/gpu-check --timeout 60 2>&1 | tee $R/gpu-check-full.log | grep -v "^  \[" | tee $OUT/gpu-check.log
echo "gpu-check exit $? after $((SECONDS - T0)) s" | tee -a $OUT/gpu-check.log
LIB=$PWD/build-gpu/src/libaoshim.so
export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
H="$PY tests/replay/data/h200-2026-11-27/hf.py"
L="--arch llama --layers 8 --hidden 2048 --seq 1024 --batch 4 --steps 8"
G="--arch gpt2 --layers 12 --hidden 1536 --seq 1024 --batch 4 --steps 8"
Q="--arch qwen2 --layers 12 --hidden 2048 --seq 1024 --batch 4 --steps 8"
one() {  # name, seconds, command...: the run's whole output in $R, its summary in hf.log
  local n=$1 s=$2; shift 2
  [ $((SECONDS - T0 + s)) -gt 540 ] && { echo "== $n skipped: no time left"; return; }
  echo "== $n ($((SECONDS - T0)) s)"
  timeout $s "$@" > $R/$n.log 2>&1; echo "exit $?"
  grep -E "HF_RESULT|GPUCHECK_RESULT|device memory in use|offload plan|late reloads|served from|aoshim: (warning|error)" $R/$n.log | head -16
}
peak() {  # the most device memory in use of a run, from its HF_RESULT
  $PY -c "import json;r=json.loads([l for l in open('$R/$1.log') if l.startswith('HF_RESULT')][-1][10:]);print(max(r['device_peak_steps']))" 2>/dev/null
}
shim() { echo env LD_PRELOAD=$LIB AOSHIM_REPORT=$R/$1.report.json AOSHIM_TRACE=$R/$1.timeline.json; }
{
one llama-base 45 $H $L
P=$(peak llama-base)
if [ -n "$P" ]; then
  one llama-hidden 50 $(shim llama-hidden) AOSHIM_BUDGET=$((P - 2305129695)) $H $L
  one llama-q25 50 $(shim llama-q25) AOSHIM_BUDGET=$((P - 2101665792)) $H $L
fi
one llama-all 50 $(shim llama-all) AOSHIM_OFFLOAD_LAYERS=all $H $L
one gpt2-base 45 $H $G
P=$(peak gpt2-base)
if [ -n "$P" ]; then
  one gpt2-hidden 50 $(shim gpt2-hidden) AOSHIM_BUDGET=$((P - 2023247086)) $H $G
  one gpt2-q25 50 $(shim gpt2-q25) AOSHIM_BUDGET=$((P - 2344124416)) $H $G
fi
one gpt2-all 50 $(shim gpt2-all) AOSHIM_OFFLOAD_LAYERS=all $H $G
# The shared step whose peak is in the optimizer (GPT 24x2048, seq 2048, batch 1):
# auto must move nothing, all must not raise the device's peak.
$PY -c "from importlib.machinery import SourceFileLoader as L; open('/tmp/train.py', 'w').write(L('g', 'scripts/gpu-check').load_module().TRAIN)"
T="$PY /tmp/train.py --layers 24 --hidden 2048 --heads 16 --seq 2048 --batch 1 --steps 6"
one gpt24b1-base 45 $T
one gpt24b1-auto 45 $(shim gpt24b1-auto) $T
one gpt24b1-all 50 $(shim gpt24b1-all) AOSHIM_OFFLOAD_LAYERS=all $T
one qwen2-base-record 50 env LD_PRELOAD=$LIB AOSHIM_ENABLE=0 AOSHIM_RECORD=$R/qwen2-base-record.trace  # committed as qwen2/base-record.trace $H $Q
P=$(peak qwen2-base-record)
# its budget the link hides as the replay's bench takes it: 55 GB/s for a third of the step
B=$($PY -c "import json;r=json.loads([l for l in open('$R/qwen2-base-record.log') if l.startswith('HF_RESULT')][-1][10:]);print(int(max(r['device_peak_steps']) - 55e9 * r['median_s'] / 3))" 2>/dev/null)
[ -n "$B" ] && one qwen2-hidden 50 $(shim qwen2-hidden) AOSHIM_BUDGET=$B $H $Q
} 2>&1 | tee $OUT/hf.log
