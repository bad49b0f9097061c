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
