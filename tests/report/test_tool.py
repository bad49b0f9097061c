#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/aoshim-report against real reports: it prints exactly the table
aoshim printed at exit, and compares two runs side by side."""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

TOOL = os.environ["AO_REPORT_TOOL"]


def main():
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        ra = runner.run({"AOSHIM_REPORT": a})
        rb = runner.run({"AOSHIM_REPORT": b, "AOSHIM_OFFLOAD_LAYERS": "2"})
        for r in (ra, rb):
            if r.returncode != 0:
                print(f"FAIL: run exit {r.returncode}\n{r.stderr[-2000:]}")
                return 1
        # The summary aoshim printed, without its pid line.
        err = ra.stderr[ra.stderr.index("aoshim: memory summary"):].splitlines()[1:]
        out = subprocess.run([sys.executable, TOOL, a], capture_output=True, text=True)
        printed = [l for l in out.stdout.splitlines() if l.startswith("aoshim:")]
        if out.returncode != 0 or printed != err:
            bad += 1
            print("FAIL: aoshim-report's table differs from the exit summary")
            for x, y in zip(printed, err):
                if x != y:
                    print(f"  tool: {x}\n  exit: {y}")
        cmp_ = subprocess.run([sys.executable, TOOL, a, b], capture_output=True, text=True)
        text = cmp_.stdout
        print(text)
        for want in ("peak device memory", "saved", "compute stream waited on reloads", "layer"):
            if want not in text:
                bad += 1
                print(f"FAIL: comparison has no '{want}'")
        if cmp_.returncode != 0:
            bad += 1
            print(f"FAIL: comparison exit {cmp_.returncode}: {cmp_.stderr}")
        bad += invalid_utf8(d)
    print("ok" if not bad else f"{bad} failures")
    return 1 if bad else 0


def invalid_utf8(d):
    """A command line with a byte that is not UTF-8 (argv[0] here): the
    report is still strict UTF-8 JSON, the byte a U+FFFD, and the tool reads
    it; a report holding the raw byte (as an older aoshim wrote it) is read
    too, never a traceback."""
    bad = 0
    path = os.path.join(d, "u.json")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AOSHIM_", "SIM_")) and k != "LD_PRELOAD"}
    env.update(LD_LIBRARY_PATH=os.environ["SIM_DIR"], SIM_QUIET="1",
               LD_PRELOAD=os.environ["AO_TEST_SHIM"], AOSHIM_REPORT=path)
    r = subprocess.run([b"train\xffstep"] + runner.WORKLOAD.split(),
                       executable=os.environ["TRAIN_STEP"], env=env, capture_output=True,
                       timeout=120)
    if r.returncode != 0:
        print(f"FAIL: run with a \\xff argv[0]: exit {r.returncode}\n{r.stderr[-2000:]!r}")
        return 1
    with open(path, "rb") as f:
        raw = f.read()
    try:
        doc = json.loads(raw.decode("utf-8"))
        if doc["command_line"][0] != "train\ufffdstep":
            bad += 1
            print(f"FAIL: command_line[0] is {doc['command_line'][0]!r}, want 'train\\ufffdstep'")
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError both
        bad += 1
        print(f"FAIL: the report is not strict UTF-8 JSON: {e}")
    raw_path = os.path.join(d, "raw.json")
    with open(raw_path, "wb") as f:
        f.write(raw.replace(b"train\\ufffdstep", b"train\xffstep"))
    for p in (path, raw_path):
        out = subprocess.run([sys.executable, TOOL, p], capture_output=True,
                             env=dict(os.environ, PYTHONIOENCODING="ascii"))
        if out.returncode != 0 or b"Traceback" in out.stderr or b"train" not in out.stdout:
            bad += 1
            err = out.stderr.decode(errors="replace")
            print(f"FAIL: aoshim-report {p}: exit {out.returncode}\n{err}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
