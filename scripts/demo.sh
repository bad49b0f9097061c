#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The demo: build, then run a transformer-shaped training step on the
# simulated GPU three times:
#   1. unconstrained, without aoshim (the reference checksum and peak);
#   2. on a device too small for it, without aoshim: out of memory;
#   3. on the same small device, under LD_PRELOAD=libaoshim.so: it completes,
#      with the reference checksum, and aoshim prints its memory summary.
# Extra arguments go to train_step (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
dir="${BUILD_DIR:-build}"
bin="$dir/tests/workloads/train_step"
shim="$dir/src/libaoshim.so"
for f in "$bin" "$shim"; do
    [ -e "$f" ] || { echo "demo: $f was not built" >&2; exit 1; }
done
# The simulated runtime dlopens libcuda.so.1 from the simulator's build dir.
export LD_LIBRARY_PATH="$PWD/$dir/tests/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SIM_QUIET=1
model=(--layers 8 --hidden 1024 --seq 1024 --batch 2 --heads 16 --fused --steps 3 "$@")
capacity=800M

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

echo "== 1. unconstrained, without aoshim (80 GiB simulated H100) =="
ref=$("$bin" "${model[@]}" | tail -n 1)
echo "$ref"

echo
echo "== 2. device limited to $capacity, without aoshim =="
set +e
small=$("$bin" "${model[@]}" --capacity "$capacity" | tail -n 1)
set -e
echo "$small"

echo
# aoshim plans the layers itself (AOSHIM_OFFLOAD_LAYERS=auto, the default):
# the first step measures, and from then on only what keeps the device
# under the budget moves.
budget=700M
echo "== 3. device limited to $capacity, with aoshim (LD_PRELOAD=$shim AOSHIM_BUDGET=$budget) =="
set +e
out=$(LD_PRELOAD="$PWD/$shim" AOSHIM_BUDGET="$budget" "$bin" "${model[@]}" --capacity "$capacity" 2>&1)
rc=$?
set -e
grep '^aoshim:' <<<"$out" || true
with=$(tail -n 1 <<<"$out")
echo "$with"

echo
if [ "$rc" -eq 0 ] && [ "$(field checksum "$with")" = "$(field checksum "$ref")" ]; then
    awk -v p0="$(field peak_device_bytes "$ref")" -v p1="$(field peak_device_bytes "$with")" \
        -v s0="$(field step_ns "$ref")" -v s1="$(field step_ns "$with")" 'BEGIN {
        printf "demo: same checksum; peak device memory %.0f MiB -> %.0f MiB (%.2fx less); ", p0/1048576, p1/1048576, p0/p1
        printf "last step %.2f ms -> %.2f ms (%.2fx) on a 50 GB/s link\n", s0/1e6, s1/1e6, s1/s0 }'
    sed -n 's/^aoshim: offload plan *\(.*\)/demo: aoshim'"'"'s plan: \1/p' <<<"$out"
else
    echo "demo: FAILED: with aoshim the run did not reproduce the reference (exit $rc)" >&2
    exit 1
fi
