#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Demo: build, then run one transformer-shaped training step on the simulated
# GPU and show its summary and machine-readable result line.
# Extra arguments go to train_step (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
dir="${AOSHIM_BUILD_DIR:-build}"
bin="$dir/tests/workloads/train_step"
if [ ! -x "$bin" ]; then
    echo "demo: $bin was not built (configured with -Dtests=false?)" >&2
    exit 1
fi
echo "== train_step on the simulated GPU (8 layers, no aoshim) =="
# The simulated runtime dlopens libcuda.so.1 from the simulator's build dir.
LD_LIBRARY_PATH="$dir/tests/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" SIM_QUIET=1 \
    "$bin" --layers 8 "$@"
