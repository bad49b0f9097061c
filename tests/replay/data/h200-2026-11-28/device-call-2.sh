#!/bin/bash
# The second device call (2026-11-28): what a 32 MiB page's mapping costs the
# host while the GPU works (tests/bench/bench_vmm_load.c): in-process loads
# (idle, a busy GPU, a busy launch path, both), then the idle measurement
# again while another process trains gpu-check's GPT16.
export PYTHONUNBUFFERED=1
PY=$(command -v python3)
cc -O2 -isystem /usr/local/cuda/include tests/bench/bench_vmm_load.c -o /tmp/bvl -ldl -lpthread || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== in-process loads"
timeout 120 /tmp/bvl 8 200
$PY -c "from importlib.machinery import SourceFileLoader as L; open('/tmp/train.py', 'w').write(L('g', 'scripts/gpu-check').load_module().TRAIN)"
echo "== while another process trains GPT16 (16x1024, seq 1024, batch 8)"
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 120 $PY /tmp/train.py --layers 16 --hidden 1024 --heads 16 --seq 1024 --batch 8 --steps 150 > /tmp/train.log 2>&1 &
sleep 12
grep -c "^step" /tmp/train.log
timeout 60 /tmp/bvl 8 200 idle
timeout 60 /tmp/bvl 8 200 idle
grep -c "^step" /tmp/train.log
wait
tail -3 /tmp/train.log | cut -c1-300
