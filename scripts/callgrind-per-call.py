#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Instructions an object executes per call, from two callgrind profiles.

usage: callgrind-per-call.py OUT_SHORT OUT_LONG OBJECT EXTRA_CALLS

The two profiles are of the same program making EXTRA_CALLS more calls in
the second run; everything else (start-up, set-up) is the same, so the
difference of OBJECT's instruction counts (summed over its functions) divided
by EXTRA_CALLS is what OBJECT executes per call (OBJECT also matches its
versioned file names, libaoshim.so.0.2.0). Prints instructions=<n>.
"""
import re
import subprocess
import sys


def total(out, obj):
    text = subprocess.run(["callgrind_annotate", "--threshold=100", out],
                          capture_output=True, text=True, check=True).stdout
    n = 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S+ \[(.*)\]$", line)
        # The object as named, or a versioned file of it (libaoshim.so.0.2.0).
        if m and re.search(re.escape(obj) + r"(\.\d+)*$", m.group(2)):
            n += int(m.group(1).replace(",", ""))
    return n


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[2])
    short, long_, obj, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if calls <= 0:
        sys.exit("callgrind-per-call: no calls")
    print(f"instructions={(total(long_, obj) - total(short, obj)) / calls:.0f}")


if __name__ == "__main__":
    main()
