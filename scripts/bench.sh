#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build (optimised) and run every benchmark program; each prints key=value figures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
dir=build-bench
if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" --buildtype=release >/dev/null
fi
ninja -C "$dir" >/dev/null
export LD_LIBRARY_PATH="$PWD/$dir/tests/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SIM_QUIET=1
for b in "$dir"/tests/bench/bench_*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    echo "== $(basename "$b") =="
    "$b"
done
