#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install what building and testing aoshim needs, once. Idempotent: a machine
# that already has everything runs no apt-get at all.
#
#   scripts/deps.sh                  build and test dependencies
#   scripts/deps.sh --with-browser   also Debian's headless Chromium (about 64 MB
#                                    to download, 300 MB installed), which the
#                                    report_render test uses to draw the HTML
#                                    report; without it that test is skipped
set -euo pipefail

pkgs=(meson ninja-build pkg-config gcc libcriterion-dev libunwind-dev zlib1g-dev python3)
for a in "$@"; do
    case "$a" in
    --with-browser) pkgs+=(chromium-headless-shell fonts-dejavu-core) ;;
    *) echo "aoshim: error: scripts/deps.sh: unknown option '$a' (accepted: --with-browser)" >&2; exit 2 ;;
    esac
done

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in "${pkgs[@]}"; do
    have_pkg "$p" || need+=("$p")
done

if [ ${#need[@]} -gt 0 ]; then
    echo "aoshim: installing build dependencies: ${need[*]}" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "aoshim: error: need root or sudo to install: ${need[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda.h" ]; then
    echo "aoshim: error: CUDA toolkit headers not found in $cuda/include: install the CUDA 13 toolkit or set CUDA_HOME" >&2
    exit 1
fi
