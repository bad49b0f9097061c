#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Instructions a wrapper adds per call, from a callgrind profile.

usage: callgrind-per-call.py CALLGRIND_OUT WRAPPER_FILE_FN WRAPPER_OBJECT

The wrapper (e.g. runtime.c:cudaLaunchKernel in libaoshim.so) calls the real
function once per call: what it adds is its inclusive cost minus the real
callee's, divided by the number of calls. Prints instructions=<n> calls=<n>.
"""
import re
import subprocess
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[2])
    out, fn, obj = sys.argv[1:]
    text = subprocess.run(["callgrind_annotate", "--tree=calling", "--threshold=100", out],
                          capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    num = lambda s: int(s.replace(",", ""))
    for i, line in enumerate(lines):
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\*\s+(\S+) \[(.*)\]", line)
        if not m or not m.group(2).endswith(fn) or obj not in m.group(3):
            continue
        total, real_cost, calls = num(m.group(1)), 0, 0
        for callee in lines[i + 1:]:
            c = re.match(r"\s*([\d,]+) \([^)]*\)\s+>\s+(\S+) \((\d[\d,]*)x\)(?: \[(.*)\])?", callee)
            if not c:
                break
            total += num(c.group(1))
            name = c.group(2).rsplit(":", 1)[-1]
            if name == fn.rsplit(":", 1)[-1] and obj not in (c.group(4) or ""):
                real_cost, calls = num(c.group(1)), num(c.group(3))
        if calls:
            print(f"instructions={(total - real_cost) / calls:.0f} calls={calls}")
            return
    sys.exit(f"callgrind-per-call: {fn} in {obj} not found in {out}")


if __name__ == "__main__":
    main()
