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
shim="$PWD/$dir/src/libaoshim.so"
for b in "$dir"/tests/bench/bench_*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    echo "== $(basename "$b") =="
    case "$(basename "$b")" in
    bench_scan)
        # Under the shim, nothing offloaded, small buffers tracked.
        scan_env=(LD_PRELOAD="$shim" AOSHIM_OFFLOAD_LAYERS=none AOSHIM_MIN_BYTES=4K
                  AOSHIM_QUIET=1 SIM_NODATA=1)
        env "${scan_env[@]}" "$b"
        if command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null; then
            out=$(mktemp)
            env "${scan_env[@]}" BENCH_SCAN_BATCHES=51 valgrind --tool=callgrind \
                --callgrind-out-file="$out" "$b" >/dev/null 2>&1
            echo "bench_scan_callgrind_$(python3 scripts/callgrind-per-call.py "$out" \
                runtime.c:cudaLaunchKernel libaoshim.so)"
            rm -f "$out"
        fi
        ;;
    *) "$b" ;;
    esac
done
