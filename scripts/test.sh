#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite: every test on the simulated GPU, the Python suite
# (PyTorch under the shim; skipped with one line when torch cannot be
# installed), then the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
meson test -C build --print-errorlogs --num-processes "$(nproc)"
bash scripts/install-check.sh

echo "== Python suite (PyTorch under the shim; aoshim-replay convert on real steps) ==" >&2
if bash scripts/pyenv.sh; then
    .venv/bin/python -m pytest -q -n "$(nproc)" -p no:cacheprovider tests/python tests/replay
fi

echo "== sanitizer pass (ASan + UBSan) ==" >&2
if [ ! -f build-san/build.ninja ]; then
    meson setup build-san -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
ninja -C build-san >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-san --suite unit --print-errorlogs --num-processes "$(nproc)"

echo "== ThreadSanitizer pass (the preloaded shim under 8 threads) ==" >&2
# Its own build: the shim, the simulator and the test programs instrumented.
# Any report fails the run (halt_on_error), as do a wrong byte, a race or
# fault the simulator saw, and the stress test's watchdog.
if [ ! -f build-tsan/build.ninja ]; then
    meson setup build-tsan -Db_sanitize=thread -Db_lundef=false >/dev/null
fi
ninja -C build-tsan >/dev/null
TSAN_OPTIONS=halt_on_error=1 \
    meson test -C build-tsan e2e_stress_tsan e2e_stress_threads e2e_stress_record --print-errorlogs \
    --num-processes "$(nproc)"
