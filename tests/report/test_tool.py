#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/aoshim-report against real reports: it prints exactly the table
aoshim printed at exit, and compares two runs side by side."""
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
    print("ok" if not bad else f"{bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
