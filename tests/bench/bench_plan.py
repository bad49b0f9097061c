# SPDX-License-Identifier: MIT
# The evidence table for AOSHIM_OFFLOAD_LAYERS=auto: transformer-shaped steps
# on the simulated GPU (no data: sizes and times), three links, three
# budgets each; for every budget the best static AOSHIM_OFFLOAD_LAYERS (the
# fastest count of first layers whose peak keeps under the budget, found by
# trying every count) against auto, and TransformerEngine's default schedule
# at its best K (AOSHIM_SCHEDULE=te AOSHIM_OFFLOAD_LAYERS=K: the same engine
# carrying out TE's schedule, offload/sched.h; every K tried).
#
#   python3 tests/bench/bench_plan.py BUILD_DIR
#
# Columns: the budget in units of one layer's activations T below the peak
# without aoshim; for static and auto: layers offloaded, peak (GiB), saving
# in T, step time against the step without aoshim; f* = min(1, forward time
# x D2H bandwidth / activation bytes), the share of the activations the link
# can carry while the forward runs (forward time taken as a third of the
# step without aoshim). The steps are train_step's last of 4. auto@TE: at
# the step time of TE's row (within 1%), auto's lowest peak (budgets halved
# between the fixed part and TE's) against TE's lowest over every K as
# fast, in T (negative: auto lower). The
# verdict compares auto with the best static choice.
#
# A second table: a step of 4 microbatches under GPipe and 1F1B (the first
# stage of two), the best static count against auto, peaks over the whole
# run (BENCH_PLAN_ONLY=mb prints only this one).
import os
import re
import subprocess
import sys

build = sys.argv[1] if len(sys.argv) > 1 else "build"
TS = os.path.join(build, "tests", "workloads", "train_step")
SHIM = os.path.abspath(os.path.join(build, "src", "libaoshim.so"))
SIM = os.path.abspath(os.path.join(build, "tests", "sim"))

MODELS = {  # layers, hidden, sequence, batch, heads
    "GPT-2-small": (12, 768, 1024, 8, 12),
    "Llama-7B": (32, 4096, 4096, 1, 32),
    "Llama-13B": (40, 5120, 4096, 1, 40),
}
# Microbatched schedules (4 microbatches, the first stage of two under 1F1B).
MB_MODELS = {"8x2048 4 mb": (8, 2048, 2048, 2, 16)}
LINKS = {"H100 PCIe5 50 GB/s": {"SIM_PROFILE": "h100"},
         "A100 PCIe4 25 GB/s": {"SIM_PROFILE": "a100"},
         "C2C 300 GB/s": {"SIM_PROFILE": "h100", "SIM_D2H_GBPS": "300", "SIM_H2D_GBPS": "300"}}


def run(model, link, shim, extra=(), **aoshim):
    n, h, s, b, a = MODELS[model] if model in MODELS else MB_MODELS[model]
    env = dict(os.environ, LD_LIBRARY_PATH=SIM, SIM_QUIET="1", **LINKS[link])
    env = {k: v for k, v in env.items() if not k.startswith("AOSHIM_")}
    env.update({k: str(v) for k, v in aoshim.items()})
    if shim:
        env["LD_PRELOAD"] = SHIM
    p = subprocess.run([TS, "--layers", str(n), "--hidden", str(h), "--seq", str(s), "--batch",
                        str(b), "--heads", str(a), "--fused", "--nodata", "--steps", "4", *extra],
                       env=env, capture_output=True, text=True)
    out = p.stdout
    line = out.strip().splitlines()[-1] if out.strip() else ""
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    if f.get("status") != "ok":
        return None
    r = {k: int(f[k]) for k in ("peak_device_bytes", "step_ns", "activation_bytes_per_layer",
                                "static_bytes")}
    m = re.search(r"^aoshim: offload plan +(?:layers 0-(\d+)|nothing)", p.stderr, re.M)
    r["planned"] = (int(m.group(1)) + 1 if m.group(1) else 0) if m else None
    return r


def auto_at(model, link, step_limit, lo, hi):
    """auto's lowest peak whose step takes at most step_limit: budgets
    between lo and hi, halved 8 times."""
    best = None
    for _ in range(8):
        mid = (lo + hi) // 2
        r = run(model, link, True, AOSHIM_OFFLOAD_LAYERS="auto", AOSHIM_BUDGET=mid)
        if r and r["step_ns"] <= step_limit and r["peak_device_bytes"] <= mid:
            best, hi = r, mid
        else:
            lo = mid
    return best


def compare(statics, auto, budget, P0, S0, T):
    """The static and auto columns of a row, and the verdict: the fastest
    static count whose peak keeps under the budget against auto."""
    GiB = 1 << 30
    fits = [(r["step_ns"], k, r) for k, r in statics.items()
            if r and r["peak_device_bytes"] <= budget]
    cols = ""
    if fits:
        st, k, r = min(fits)
        cols += (f"{k:>6} {r['peak_device_bytes'] / GiB:6.2f} "
                 f"{(P0 - r['peak_device_bytes']) / T:5.1f} {st / S0:5.2f}x | ")
    else:
        cols += f"{'none fits':>27} | "
    if not auto:
        return cols + f"{'failed':>27} | ", "failed"
    ap, ast = auto["peak_device_bytes"], auto["step_ns"]
    k = auto["planned"] if auto["planned"] is not None else "?"
    cols += f"{k:>4} {ap / GiB:6.2f} {(P0 - ap) / T:5.1f} {ast / S0:5.2f}x | "
    if ap > budget:
        verdict = f"over budget by {100 * (ap / budget - 1):.1f}%"
    elif fits:
        st = min(fits)[0]
        verdict = "as good" if ast <= 1.01 * st else f"{ast / st:.2f}x static"
    else:
        verdict = "under budget"
    return cols, verdict


def main():
    GiB = 1 << 30
    print(f"{'model':12} {'link':19} {'budget':>7} | {'static':>6} {'peak':>6} {'save':>5} "
          f"{'step':>6} | {'auto':>4} {'peak':>6} {'save':>5} {'step':>6} | {'TE':>3} {'peak':>6} "
          f"{'step':>6} | {'auto@TE':>7} | {'f*':>4}  verdict")
    for model in MODELS:
        n = MODELS[model][0]
        for link in LINKS:
            base = run(model, link, False)
            P0, S0, T = base["peak_device_bytes"], base["step_ns"], base["activation_bytes_per_layer"]
            acts = P0 - base["static_bytes"]
            gbps = float(LINKS[link].get("SIM_D2H_GBPS", 25 if LINKS[link]["SIM_PROFILE"] == "a100"
                                         else 50))
            fstar = min(1.0, (S0 / 3) * gbps / acts)  # GB/s = bytes per ns
            statics = {k: run(model, link, True, AOSHIM_OFFLOAD_LAYERS=k) for k in range(n - 1)}
            tes = {k: run(model, link, True, AOSHIM_SCHEDULE="te", AOSHIM_OFFLOAD_LAYERS=k)
                   for k in range(1, n)}
            for below in (2, n // 4, n // 2):
                budget = P0 - below * T
                auto = run(model, link, True, AOSHIM_OFFLOAD_LAYERS="auto", AOSHIM_BUDGET=budget)
                te_fits = [(r["step_ns"], k, r) for k, r in tes.items()
                           if r and r["peak_device_bytes"] <= budget]
                cols, verdict = compare(statics, auto, budget, P0, S0, T)
                row = f"{model:12} {link:19} {'-' + str(below) + 'T':>7} | " + cols
                if te_fits:
                    tst, tk, tr = min(te_fits)
                    row += (f"{tk:>3} {tr['peak_device_bytes'] / GiB:6.2f} {tst / S0:5.2f}x | ")
                    # At TE's step time, each policy's lowest peak: TE's over
                    # every K as fast, auto's over budgets.
                    te_low = min(r["peak_device_bytes"] for r in tes.values()
                                 if r and r["step_ns"] <= 1.01 * tst)
                    a = auto_at(model, link, 1.01 * tst, base["static_bytes"], te_low)
                    gain = (te_low - a["peak_device_bytes"]) / T if a else 0.0
                    row += f"{-gain:+6.1f}T | "
                else:
                    row += f"{'none fits':>19} | {'':>7} | "
                print(row + f"{fstar:4.2f}  {verdict}", flush=True)


def main_mb():
    """Microbatched steps: the best static count against auto, per schedule,
    budgets in T of one microbatch's layer below the need (1F1B holds two
    microbatches at once, GPipe all four). Peaks are the whole run's, the
    measuring step included."""
    link = "H100 PCIe5 50 GB/s"
    print(f"\n{'model':12} {'schedule':8} {'budget':>7} | {'static':>6} {'peak':>6} {'save':>5} "
          f"{'step':>6} | {'auto':>4} {'peak':>6} {'save':>5} {'step':>6} | verdict")
    for model in MB_MODELS:
        n = MB_MODELS[model][0]
        for sched, belows in (("gpipe", (8, 16, 24)), ("1f1b", (4, 8, 10))):
            extra = ("--microbatches", "4", "--schedule", sched)
            base = run(model, link, False, extra)
            P0, S0, T = base["peak_device_bytes"], base["step_ns"], base["activation_bytes_per_layer"]
            statics = {k: run(model, link, True, extra, AOSHIM_OFFLOAD_LAYERS=k) for k in range(n)}
            for below in belows:
                budget = P0 - below * T
                auto = run(model, link, True, extra, AOSHIM_OFFLOAD_LAYERS="auto",
                           AOSHIM_BUDGET=budget)
                cols, verdict = compare(statics, auto, budget, P0, S0, T)
                row = f"{model:12} {sched:8} {'-' + str(below) + 'T':>7} | " + cols
                print(row + verdict, flush=True)


if __name__ == "__main__":
    if os.environ.get("BENCH_PLAN_ONLY") != "mb":
        main()
    main_mb()
