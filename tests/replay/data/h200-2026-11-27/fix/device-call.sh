#!/bin/bash
# The second device call (2026-11-27): the fix (a handle per mapped range
# while serving, mem/vmm.c) on the same checks: gpu-check's full verdict,
# then the Llama 8x2048 under all and under its budget, and GPT-2 under all.
export PYTHONUNBUFFERED=1
T0=$SECONDS
PY=$(command -v python3)
export PATH="$(dirname "$PY"):$PATH"
set -o pipefail
timeout 230 $PY scripts/gpu-check --timeout 60 2>&1 | grep -v "^  \[" | tee $OUT/gpu-check.log
echo "gpu-check exit $? after $((SECONDS - T0)) s" | tee -a $OUT/gpu-check.log
LIB=$PWD/build-gpu/src/libaoshim.so
export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
H="$PY .gpu-carry/hf.py"
L="--arch llama --layers 8 --hidden 2048 --seq 1024 --batch 4 --steps 8"
G="--arch gpt2 --layers 12 --hidden 1536 --seq 1024 --batch 4 --steps 8"
one() {
  local n=$1 s=$2; shift 2
  [ $((SECONDS - T0 + s)) -gt 330 ] && { echo "== $n skipped: no time left"; return; }
  echo "== $n ($((SECONDS - T0)) s)"
  timeout $s "$@" > $OUT/$n.log 2>&1; echo "exit $?"
  grep -E "HF_RESULT|device memory in use|offload plan|late reloads|served from" $OUT/$n.log
}
{
one llama8-all 40 env LD_PRELOAD=$LIB AOSHIM_OFFLOAD_LAYERS=all $H $L
one llama8-budget 40 env LD_PRELOAD=$LIB AOSHIM_BUDGET=13329088512 $H $L
one gpt2-all 40 env LD_PRELOAD=$LIB AOSHIM_OFFLOAD_LAYERS=all $H $G
} 2>&1 | tee $OUT/hf.log
echo "total $((SECONDS - T0)) s"
