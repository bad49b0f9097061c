#!/bin/bash
# One device call (2026-11-27): gpu-check's full verdict with --record on the
# current defaults (serving, lending, the pool model), then two Hugging Face
# models built from configs: a Llama 8x2048 (without aoshim; all, recorded;
# auto with a budget 25% under) and a GPT-2 12x1536 (recorded without aoshim;
# all; its third step as PyTorch's execution trace and allocator history).
export PYTHONUNBUFFERED=1
T0=$SECONDS
PY=$(command -v python3)
export PATH="$(dirname "$PY"):$PATH"
{ nvidia-smi; uname -a; $PY -c 'import torch,transformers;print(torch.__version__, torch.version.cuda, transformers.__version__)'; } > $OUT/env.txt 2>&1
R=/tmp/rec; mkdir -p $R/llama8 $R/gpt2
pack() {
  cd /tmp && tar czf $OUT/rec.tgz rec && cd $OUT && split -b 15M rec.tgz rec.tgz. && rm rec.tgz
  ls -la $OUT; echo "total $((SECONDS - T0)) s"
}
trap pack EXIT
set -o pipefail
timeout 330 $PY scripts/gpu-check --timeout 110 --record $R/gpt16 2>&1 | tee $OUT/gpu-check.log
echo "gpu-check exit $? after $((SECONDS - T0)) s" | tee -a $OUT/gpu-check.log
LIB=$PWD/build-gpu/src/libaoshim.so
[ -f "$LIB" ] || LIB=$PWD/.gpu-carry/libaoshim.so
echo "lib $LIB" >> $OUT/env.txt
export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
H="$PY .gpu-carry/hf.py"
L="--arch llama --layers 8 --hidden 2048 --seq 1024 --batch 4 --steps 8"
G="--arch gpt2 --layers 12 --hidden 1536 --seq 1024 --batch 4 --steps 8"
one() {  # name, seconds, command...: the run's whole output in $R, its summary in hf.log
  local n=$1 s=$2; shift 2
  [ $((SECONDS - T0 + s)) -gt 560 ] && { echo "== $n skipped: no time left"; return; }
  echo "== $n ($((SECONDS - T0)) s)"
  timeout $s "$@" > $R/$n.log 2>&1; echo "exit $?"
  grep -v "^aoshim:    " $R/$n.log | grep -v "^step [2-5] " | tail -24
}
{
one llama8/base 45 $H $L
B=$($PY -c "import json,sys;r=json.loads([l for l in open('$R/llama8/base.log') if l.startswith('HF_RESULT')][-1][10:]);print(int(max(r['device_peak_steps'])*0.75))" 2>/dev/null)
echo "llama budget $B"
one llama8/all 60 env LD_PRELOAD=$LIB AOSHIM_OFFLOAD_LAYERS=all AOSHIM_RECORD=$R/llama8/all.trace AOSHIM_REPORT=$R/llama8/all.report.json $H $L
[ -n "$B" ] && one llama8/budget 60 env LD_PRELOAD=$LIB AOSHIM_BUDGET=$B AOSHIM_REPORT=$R/llama8/budget.report.json $H $L
one gpt2/base-record 45 env LD_PRELOAD=$LIB AOSHIM_ENABLE=0 AOSHIM_RECORD=$R/gpt2/base-record.trace $H $G
one gpt2/all 60 env LD_PRELOAD=$LIB AOSHIM_OFFLOAD_LAYERS=all AOSHIM_REPORT=$R/gpt2/all.report.json $H $G
one gpt2/et 45 $H $G --mode et --out $R/gpt2/step.et.json.gz
one gpt2/snapshot 45 env -u PYTORCH_CUDA_ALLOC_CONF $H $G --mode snapshot --out $R/gpt2/step.alloc-history.pickle.gz
} 2>&1 | tee $OUT/hf.log
gzip -9 $R/*/*.report.json 2>/dev/null
cp .gpu-carry/hf.py $R/
