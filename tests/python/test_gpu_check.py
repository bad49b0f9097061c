# SPDX-License-Identifier: MIT
# scripts/gpu-check --cpu-selftest with CPU torch (issue 21): the verdict's
# own checks on recorded results, then the tiny model trained on the CPU as
# the real check trains it (math attention, fixed seeds, the same child
# program), twice without aoshim and once preloaded with it, and judged by
# the same verdict: the baseline repeats, `all` gives the same bits, PASS.
# Without a GPU the device's memory is not sampled; tests/gpucheck checks
# the verdict on memory figures recorded on one.
import gzip
import json
import re
import shlex
import subprocess
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


def test_cpu_selftest_record(tmp_path):
    # --record on the CPU: the run under aoshim and the extra record-only run
    # of the baseline write their AOSHIM_RECORD traces, the capture runs
    # write the execution trace and the profiler trace of the third step
    # (the allocator history needs CUDA: skipped, and said), README.md
    # gives the convert command, and that command works. The verdict is
    # the same as without --record; the count of files is the last line.
    rec = tmp_path / "rec"
    p = run([sys.executable, str(ROOT / "scripts" / "gpu-check"), "--cpu-selftest",
             "--python", sys.executable, "--lib", str(SHIM), "--record", str(rec)], check=False)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "gpu-check: capture snapshot: skipped (the allocator history needs CUDA)\n" in out, out
    assert "gpu-check: PASS\n" in out, out
    made = sorted(f.name for f in rec.iterdir())
    assert made == ["README.md", "all.stderr.txt", "all.trace", "base-record.trace", "base.stderr.txt",
                    "base2.stderr.txt", "capture.py", "runs.json", "step.et.json.gz",
                    "step.torch-profile.json.gz"], made
    assert out.endswith(f"gpu-check: PASS\ngpu-check: recorded 10 files in {rec}\n"), out
    # Every figure the runs sent back, and the verdict, for a later look.
    runs = json.loads((rec / "runs.json").read_text())
    assert runs["verdict"]["ok"] and sorted(runs["runs"]) == ["all", "base", "base2"], runs
    assert runs["runs"]["base"]["losses"] == runs["runs"]["all"]["losses"], runs
    assert "stderr" not in runs["runs"]["all"], runs
    assert "aoshim" in (rec / "all.stderr.txt").read_text()
    for name in ("all.trace", "base-record.trace"):
        with gzip.open(rec / name, "rt") as f:
            text = f.read()
        assert text.startswith("aoshim-trace 1\n") and "\nend " in text, (name, text[:300])
    readme = (rec / "README.md").read_text()
    assert "- torch: " in readme and "- device: cpu (self-test)" in readme, readme
    cmd = re.search(r"^    (aoshim-replay convert .*)$", readme, re.M).group(1)
    assert cmd == "aoshim-replay convert --et step.et.json.gz -o step.trace", cmd
    c = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "aoshim-replay")] + shlex.split(cmd)[1:],
        cwd=rec, capture_output=True, text=True, timeout=300)
    assert c.returncode == 0, c.stdout + c.stderr
    assert "aoshim-replay: layers: 2 x " in c.stderr, c.stderr
    assert (rec / "step.trace").exists()
