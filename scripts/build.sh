#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Configure (once) and build into build/ (or $BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
dir="${BUILD_DIR:-build}"
if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null
# A build directory from before the library had a soname: its ninja log
# still names the old libaoshim.so file, so meson's clean-up deletes the new
# link at each regeneration. Compacting the log once fixes it for good.
if [ -e "$dir/src/libaoshim.so.0" ] && [ ! -e "$dir/src/libaoshim.so" ]; then
    ninja -C "$dir" -t recompact >/dev/null
    meson setup --reconfigure "$dir" >/dev/null
    ninja -C "$dir" >/dev/null
fi
