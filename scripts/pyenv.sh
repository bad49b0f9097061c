#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python test environment: a virtual environment in .venv (or $AO_VENV)
# with torch from PyPI (its CUDA build trains on the CPU; about 5 GB and 5
# minutes the first time, then pip's cache serves it), numpy, pytest and
# pytest-xdist. Idempotent. Exit 0 when ready; otherwise one line on stderr
# saying why, and exit 3, so that the caller can skip the Python tests.
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${AO_VENV:-.venv}"
ready="$venv/.aoshim-ready"
pkgs=(torch numpy pytest pytest-xdist)
[ -f "$ready" ] && [ "$(cat "$ready")" = "${pkgs[*]}" ] && exit 0

skip() { echo "aoshim: Python tests skipped: $*" >&2; exit 3; }
command -v python3 >/dev/null || skip "no python3"
if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian splits venv (and its pip) out of python3.
    v=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get install -y -qq --no-install-recommends "python$v-venv" python3-venv >/dev/null 2>&1 ||
        skip "cannot create a virtual environment (python3 -m venv failed; python$v-venv not installable)"
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed"
fi
echo "aoshim: installing ${pkgs[*]} into $venv (first time: several minutes)" >&2
log=$(mktemp)
if ! "$venv/bin/pip" install --disable-pip-version-check -q "${pkgs[@]}" >"$log" 2>&1; then
    skip "pip install ${pkgs[*]} failed: $(grep -m1 -iE 'error|could not' "$log" || tail -n1 "$log")"
fi
rm -f "$log"
echo "${pkgs[*]}" >"$ready"
