#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build (optimised) and run every benchmark program; each prints key=value figures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
dir=build-bench
if [ ! -f "$dir/build.ninja" ]; then
    # Optimised, with debug info: callgrind attributes instructions to functions.
    meson setup "$dir" --buildtype=release -Ddebug=true >/dev/null
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
        # Nothing offloaded, small buffers tracked (a list naming only layer
        # 100, which the bench never runs: 'none' would track nothing); the
        # simulator alone and under the shim, three runs each, the lowest
        # median kept.
        scan_env=(AOSHIM_OFFLOAD_LAYERS=100-100 AOSHIM_MIN_BYTES=4K AOSHIM_QUIET=1 SIM_NODATA=1)
        best() { for _ in 1 2 3; do env "$@" "$b" | sed -n 's/^bench_scan_launch_ns=//p'; done | sort -n | head -1; }
        sim=$(best "${scan_env[@]}")
        shimmed=$(best "${scan_env[@]}" LD_PRELOAD="$shim")
        env "${scan_env[@]}" LD_PRELOAD="$shim" "$b" | grep -v launch_ns
        echo "bench_scan_sim_launch_ns=$sim"
        echo "bench_scan_shim_launch_ns=$shimmed"
        echo "bench_scan_extra_ns=$((shimmed - sim))"
        if command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null; then
            # Instructions in libaoshim.so per launch: two runs 50 batches apart.
            a=$(mktemp) z=$(mktemp)
            for n in 11 61; do
                out=$a; [ $n = 61 ] && out=$z
                env "${scan_env[@]}" LD_PRELOAD="$shim" BENCH_SCAN_BATCHES=$n valgrind --tool=callgrind \
                    --callgrind-out-file="$out" "$b" >/dev/null 2>&1
            done
            echo "bench_scan_aoshim_$(python3 scripts/callgrind-per-call.py "$a" "$z" libaoshim.so 3200)_per_launch"
            rm -f "$a" "$z"
        fi
        ;;
    *) "$b" ;;
    esac
done
# The Python bootstrap's start-up cost (and torch support's share of
# `import torch`, with the project's virtual environment when it exists).
echo "== bench_pyboot =="
py=$(command -v python3); [ -x .venv/bin/python ] && py="$PWD/.venv/bin/python"
"$py" tests/bench/bench_pyboot.py "$shim" "$py"
# AOSHIM_OFFLOAD_LAYERS=auto against the best static count, three models,
# three links, three budgets (the simulated GPU, no data).
echo "== bench_plan =="
python3 tests/bench/bench_plan.py "$dir"
# A step whose peak is not in the optimizer (train_step --pytorch), recorded
# and replayed: all, auto under two budgets and every static count, by the
# driver's count, against issue 22's targets.
echo "== bench_forward_peak =="
python3 tests/bench/bench_forward_peak.py "$dir"
# Every step trace under tests/replay/data/ replayed on the simulated GPU (no
# data, the trace's device size), without aoshim and with
# AOSHIM_OFFLOAD_LAYERS=all: the replay's line for each (docs/replay.md).
# The deliberately broken traces (uaf_*, bad_*) print the status that
# stopped them.
echo "== replay =="
for t in tests/replay/data/*.trace tests/replay/data/*.trace.gz; do
    [ -f "$t" ] || continue
    for with in off all; do
        shim_args=()
        [ $with = all ] && shim_args=(--shim "$shim" AOSHIM_OFFLOAD_LAYERS=all AOSHIM_QUIET=1)
        l=$(python3 scripts/aoshim-replay run "$t" --build "$dir" "${shim_args[@]}" 2>/dev/null |
            tail -n 1) || true
        echo "trace=$(basename "$t") aoshim=$with $l"
    done
done
