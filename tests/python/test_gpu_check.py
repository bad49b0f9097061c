# SPDX-License-Identifier: MIT
# scripts/gpu-check --cpu-selftest with CPU torch (issue 21): the verdict's
# own checks on recorded results, then the tiny model trained on the CPU as
# the real check trains it (math attention, fixed seeds, the same child
# program), twice without aoshim and once preloaded with it, and judged by
# the same verdict: the baseline repeats, `all` gives the same bits, PASS.
# Without a GPU the device's memory is not sampled; tests/gpucheck checks
# the verdict on memory figures recorded on one.
import re
import sys

from conftest import ROOT, SHIM, run


def test_cpu_selftest():
    p = run([sys.executable, str(ROOT / "scripts" / "gpu-check"), "--cpu-selftest",
             "--python", sys.executable, "--lib", str(SHIM)], check=False)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "gpu-check: self-test: the verdict on recorded results is right\n" in out
    assert "baseline repeats: yes\n" in out, out
    assert re.search(r"^  without aoshim, again +[0-9.]+ ms .* identical$", out, re.M), out
    assert re.search(r"^  all +[0-9.]+ ms .* identical$", out, re.M), out
    assert out.endswith("gpu-check: PASS\n"), out
