#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# What the Python bootstrap costs at interpreter start-up, and what aoshim's
# torch support adds to `import torch`: medians of N runs of each command,
# without the shim, with it but the bootstrap off (AOSHIM_TORCH=0: the
# constructor alone), and with the bootstrap. Prints key=value figures.
#   bench_pyboot.py SHIM [PYTHON] [N]
import os
import statistics
import subprocess
import sys
import time


def median_ms(argv, env, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    shim = sys.argv[1]
    python = sys.argv[2] if len(sys.argv) > 2 else sys.executable
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 21
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("AOSHIM_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
    base["AOSHIM_QUIET"] = "1"
    envs = {"none": base, "shim_no_boot": dict(base, LD_PRELOAD=shim, AOSHIM_TORCH="0"),
            "shim": dict(base, LD_PRELOAD=shim)}
    cases = [("start", [python, "-c", "pass"])]
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
        cases.append(("import_torch", [python, "-c", "import torch"]))
    for name, argv in cases:
        ms = {k: median_ms(argv, e, n if name == "start" else max(5, n // 4))
              for k, e in envs.items()}
        for k, v in ms.items():
            print(f"bench_pyboot_{name}_{k}_ms={v:.1f}")
        print(f"bench_pyboot_{name}_bootstrap_ms={ms['shim'] - ms['shim_no_boot']:.1f}")
        print(f"bench_pyboot_{name}_shim_total_ms={ms['shim'] - ms['none']:.1f}")


if __name__ == "__main__":
    main()
