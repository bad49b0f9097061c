#!/bin/sh
# SPDX-License-Identifier: MIT
# A GPU machine as it comes has the CUDA toolkit, meson, ninja and a C
# compiler, and often no libunwind headers (issue 21): the library must build
# there, meson must say in one line that call sites are off, and so must the
# library when it runs.
#
# The headers are hidden, not removed: no .pc file is found (an empty
# PKG_CONFIG_LIBDIR) and a libunwind.h that stops any compilation comes first
# on the include path, so a file that still needs the header fails the build.
# Only the library is built, unoptimized (-O0 on 2 cores takes seconds), from
# this source tree into a scratch directory; the run is train_step on the
# simulated GPU, from the test's own build.
#
#   no_libunwind.sh SRCDIR MESON TRAIN_STEP SIM_DIR
set -u
src=$1 meson=$2 train=$3 sim=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/aoshim-bare.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include" "$tmp/pc"
printf '#error "libunwind.h is hidden by tests/bare/no_libunwind.sh"\n' >"$tmp/include/libunwind.h"
fail() { echo "FAIL: $*"; exit 1; }

# -Dtests=false: gpu-check's own configuration (no criterion, no simulator).
if ! PKG_CONFIG_LIBDIR="$tmp/pc" CFLAGS="-I$tmp/include" \
    "$meson" setup "$tmp/build" "$src" -Dtests=false --buildtype=plain >"$tmp/setup.log" 2>&1; then
    cat "$tmp/setup.log"
    fail "meson setup failed without libunwind's headers"
fi
n=$(grep -c "call sites are off" "$tmp/setup.log")
[ "$n" = 1 ] || { cat "$tmp/setup.log"; fail "meson said 'call sites are off' $n times, want 1"; }
grep "call sites are off" "$tmp/setup.log"
grep -q "AO_HAVE_LIBUNWIND=0" "$tmp/build/build.ninja" || fail "the build does not have AO_HAVE_LIBUNWIND=0"

if ! "$meson" compile -C "$tmp/build" aoshim:shared_library >"$tmp/compile.log" 2>&1; then
    tail -n 30 "$tmp/compile.log"
    fail "the library did not build without libunwind's headers"
fi
lib="$tmp/build/src/libaoshim.so"

# At run time: one line, at the first tracked allocation; the run as usual.
out=$(LD_PRELOAD="$lib" LD_LIBRARY_PATH="$sim" AOSHIM_OFFLOAD_LAYERS=all \
      AOSHIM_REPORT="$tmp/report.json" SIM_QUIET=0 "$train" 2>&1)
rc=$?
[ $rc = 0 ] || { echo "$out" | tail -n 20; fail "train_step under the library exited $rc"; }
n=$(echo "$out" | grep -c "^aoshim: call sites are off")
[ "$n" = 1 ] || { echo "$out"; fail "the library said 'call sites are off' $n times, want 1"; }
echo "$out" | grep "^aoshim: call sites are off"
echo "$out" | grep -q "^aoshim: layer offloads / reloads  *[1-9]" || { echo "$out"; fail "nothing was offloaded"; }
echo "$out" | grep -q "races=0 faults=0" || { echo "$out"; fail "the simulator saw a race or a fault"; }
grep -q '"stacks_captured": *0' "$tmp/report.json" || fail "the report has captured stacks"
echo "ok: builds and runs without libunwind's headers, call sites off"
