# SPDX-License-Identifier: MIT
# Issue 22's step whose peak is not in the optimizer: train_step --pytorch
# (bf16 autocast's weight casts inside each block, fp32 gradients made by the
# backward, AdamW's multi-tensor step) recorded with AOSHIM_RECORD, then
# replayed on the simulated GPU at a 55 GB/s link, every figure by the
# driver's count (the replay's peak_in_use_bytes). It prints, for the trace:
#   - without aoshim: peak in use, median step, and the most the program
#     allocated in a forward layer (fwd_most_allocated_gib, the replay's
#     figure: what any allocator holds in the forward at least);
#   - all: peak in use, and what it saved against the bytes off the device at
#     the peak (aoshim's report: peak allocated without offloading less peak
#     allocated); the target is 60% or more;
#   - auto with a budget the link can hide (the peak less what a 55 GB/s link
#     carries in a third of the step, the forward's share): step time against
#     without aoshim (target 1.03x or less) and the budget kept or not, each
#     step;
#   - auto with a budget the link hides in the forward as measured (the
#     issue's words: the bytes fit into the forward's time at the link's
#     rate; the forward's layers without offloading, from aoshim's timeline
#     of them), hidden_fwd: the same figures (target 1.03x or less); where
#     the forward is less than a third of the step, a budget nearer the
#     peak than the one above;
#   - auto with a budget 25% of the activations under the peak: kept or not,
#     and its step time against the fastest static AOSHIM_OFFLOAD_LAYERS=k
#     that keeps it (target 1.10x or less);
#   - for both budgets, the median step from the fourth on against without
#     aoshim (steps_x_from_4th: the last step alone can flatter a plan whose
#     steps swing), and the time the last step lost (exposed_ms) beside what
#     the plan said its copies would expose (plan_exposed_ms): the planner's
#     model against the engine; and the host's time in virtual-memory calls
#     (vmm_ms_per_step, the simulator's H200 figures, the run's mean) with
#     the mappings aoshim made in the last step (mappings_last_step, from
#     its report: physical memory moved between address ranges) and the
#     handles it made there (handles_made_last_step: memory made anew,
#     cuMemCreate); and for
#     the budget the link hides, the floors, from the steps without
#     offloading (aoshim's timeline of their layers, the replay's most
#     allocated in each layer and in the head after the last): floor_x, the
#     least step time any schedule whose copies start at a layer's end can
#     have there, whatever its allocator (what the program allocated beyond
#     the budget off by each forward layer's end, and by the last one's for
#     the head, the link carrying it from layer 0's end on); floor_pool_x,
#     the same with the device's memory beyond the allocations kept as it is
#     without aoshim (the peak in use less the budget off by the peak: a
#     schedule that leaves the program's allocator as it is); floor_any_x,
#     that for copies from the forward's start (every tensor copied as it
#     is made): above 1.03, the budget is more than the forward's time
#     carries unless memory is packed tighter; floor_bwd_x, the backward's
#     side (what must still be off at each point against what the link can
#     have brought back by each later layer's backward: 1.00 where the
#     backward binds no schedule);
#     and vmm_free_last_step_x, the last step of the same run with the
#     host's virtual-memory calls free (the simulator's SIM_VMM_COST=0):
#     what the budget costs beyond the host's mapping;
#   - every static k: peak, step.
# Then the same for each step recorded on a real GPU in the repository
# (tests/replay/data/*/base-record.trace and */*/base-record.trace, its
# context modelled).
# The measuring step (the first) is shown apart; under auto the figures are
# the last step's (the plan converges over the steps), with every step's peak.
#
#   python3 tests/bench/bench_forward_peak.py BUILD_DIR
import json
import os
import re
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TS = os.path.join(build, "tests", "workloads", "train_step")
SHIM = os.path.abspath(os.path.join(build, "src", "libaoshim.so"))
SIM = os.path.abspath(os.path.join(build, "tests", "sim"))
TOOL = os.path.join(ROOT, "scripts", "aoshim-replay")
LINK = 55.0  # GB/s: the H200's, measured
MODEL = ["--layers", "8", "--hidden", "1024", "--seq", "1024", "--batch", "4", "--heads", "16"]
STEPS = 8


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("AOSHIM_", "SIM_")) and k != "LD_PRELOAD"}


def record(path):
    e = clean_env()
    e.update(LD_LIBRARY_PATH=SIM, LD_PRELOAD=SHIM, AOSHIM_ENABLE="0", AOSHIM_RECORD=path,
             AOSHIM_QUIET="1")
    subprocess.run([TS, "--pytorch", "--nodata", "--steps", str(STEPS), *MODEL], env=e,
                   check=True, capture_output=True, text=True, timeout=300)


def replay(trace, *aoenv, sim=()):
    """(figures of the replay line, per-step peaks in use, per-step times, aoshim's report).
    sim: the simulator's own NAME=VALUE pairs (the context a GPU's trace had)."""
    with tempfile.TemporaryDirectory() as d:
        rep = os.path.join(d, "r.json")
        cmd = [sys.executable, TOOL, "run", trace, "--build", build, "--link", str(int(LINK)), *sim]
        if aoenv:
            cmd += ["--shim", SHIM, *aoenv, f"AOSHIM_REPORT={rep}", "AOSHIM_QUIET=1"]
        p = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=300)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        fig = {k: int(v) if v.isdigit() else v
               for k, v in (w.split("=", 1) for w in last.split()[1:])}
        vmm = re.search(r"simgpu: .*\bvmm_host_ns=(\d+)", p.stderr)
        if vmm and fig.get("steps"):
            fig["vmm_ms_per_step"] = int(vmm.group(1)) / 1e6 / fig["steps"]
        peaks = re.search(r"peak_in_use_bytes of each step:((?: \d+)+)", p.stderr)
        times = re.search(r"step_ns of each step:((?: \d+)+)", p.stderr)
        fwd = re.search(r"most allocated_bytes in each forward layer of the last step:((?: \d+:\d+)+)",
                        p.stderr)
        if fwd:
            fig["fwd_alloc"] = {int(k): int(v) for k, v in (w.split(":") for w in fwd.group(1).split())}
        bwd = re.search(r"most allocated_bytes in each backward layer of the last step:((?: \d+:\d+)+)",
                        p.stderr)
        if bwd:
            fig["bwd_alloc"] = {int(k): int(v) for k, v in (w.split(":") for w in bwd.group(1).split())}
        head = re.search(r"most allocated_bytes from the forward's last layer to the backward of the "
                         r"last step: (\d+)", p.stderr)
        if head:
            fig["head_alloc"] = int(head.group(1))
        doc = None
        if aoenv and os.path.exists(rep):
            with open(rep) as f:
                doc = json.load(f)
        return (fig, [int(x) for x in peaks.group(1).split()] if peaks else [],
                [int(x) for x in times.group(1).split()] if times else [], doc)


def gib(b):
    return f"{b / 2**30:.2f}"


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0


def layer_times(trace, sim=()):
    """Each layer's forward and backward on the GPU, from the start of layer
    0's forward, in steps that offload nothing (aoshim tracking nothing: its
    timeline, AOSHIM_TRACE), the median over the steps after the first, in
    ns: {("forward" or "backward", layer): (start, end)}."""
    with tempfile.TemporaryDirectory() as d:
        tl = os.path.join(d, "t.json")
        replay(trace, "AOSHIM_OFFLOAD_LAYERS=0", f"AOSHIM_TRACE={tl}", sim=sim)
        if not os.path.exists(tl):
            return {}
        with open(tl) as f:
            doc = json.load(f)
    ev = [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc)
          if e.get("ph") == "X" and re.match(r"(forward|backward) L\d+ ", e.get("name", ""))]
    starts = sorted(e["ts"] for e in ev if e["name"].startswith("forward L0 "))
    spans = {}
    for i in range(1, len(starts)):
        hi = starts[i + 1] if i + 1 < len(starts) else float("inf")
        for e in ev:
            if starts[i] <= e["ts"] < hi:
                key = (e["name"].split()[0], int(e["name"].split()[1][1:]))
                spans.setdefault(key, []).append(((e["ts"] - starts[i]) * 1000,
                                                  (e["ts"] + e["dur"] - starts[i]) * 1000))
    return {k: (median([a for a, _ in v]), median([b for _, b in v])) for k, v in spans.items()}


def forward_ends(spans):
    """Each forward layer's end (layer_times): {layer: end}."""
    return {l: end for (kind, l), (_, end) in spans.items() if kind == "forward"}


def floor_x(doc, step, fwd_end, hide, from_start=False, curve=None, pool=False):
    """The least step time, against the step without aoshim, of any schedule
    whose copies start at a layer's end (from_start: at the forward's start,
    as if every tensor went as it was made); the link carries them from
    layer 0's end on. curve: (the context's bytes, the budget, the most the
    program allocated in each forward layer without aoshim, and in the head
    after the last one, from the replay): whatever allocates, layer L holds
    at least the context and those bytes by its end (the head by the last
    layer's end), so all above the budget must be off by then, and the
    forward stops for what the link cannot carry by then. pool: the same
    with the device's memory beyond the allocations at the peak kept as it
    is without aoshim (the pool's reserve, its rounding): hide bytes, the
    peak in use less the budget, off by the peak, which has passed by layer
    L's end where the plan names the forward of layer L or the time after
    it; a floor for a schedule that leaves the program's allocator as it
    is, not for one that packs its memory tighter. Where nothing binds, the
    forward gives no bound (1.00)."""
    if 0 not in fwd_end:
        return 1.0
    t0 = 0 if from_start else fwd_end[0]
    need = []  # (bytes off by then, window)
    m = re.search(r"its peak in (?:the forward of layer |no layer \(after the forward of layer |"
                  r"the head \(after the last layer's forward, layer )(\d+)",
                  ((doc or {}).get("summary") or {}).get("plan") or "")
    if pool and m and int(m.group(1)) in fwd_end:
        need.append((hide, fwd_end[int(m.group(1))] - t0))
    if curve:
        ctx, budget, alloc, head = curve
        need += [(ctx + b - budget, fwd_end[l] - t0) for l, b in alloc.items() if l in fwd_end]
        if head:
            need.append((ctx + head - budget, fwd_end[max(fwd_end)] - t0))
    stop = max([0.0] + [n / LINK - w for n, w in need])
    return (step + stop) / step


def floor_bwd_x(step, spans, ctx, budget, base, layer_bytes):
    """The backward's side of the same floor: the least step time, against
    the step without aoshim, that bringing the bytes back allows any
    schedule of layers' copies. At each point of the step without aoshim
    where the program had U allocated (the most in a forward layer, from its
    start; in the head, from the last forward layer's end; in a backward
    layer, from its start), at least ctx + U - budget bytes are off the
    device. By the end of layer k's backward, which has read its layer's
    bytes, at most the bytes of the layers below k are still off
    (layer_bytes: each layer's tracked bytes a step, all it could have had
    off). The difference crosses the link (one direction, at LINK) between
    the two points, or the step stops for it. A lower bound: it ignores the
    memory the reloads need, the host's mapping, and that a layer's backward
    reads its bytes before its end. 1.00: the backward binds no schedule."""
    bwd = {l: se for (kind, l), se in spans.items() if kind == "backward"}
    fwd = {l: se for (kind, l), se in spans.items() if kind == "forward"}
    if not bwd or not fwd:
        return 1.0
    points = [(fwd[l][0], u) for l, u in (base.get("fwd_alloc") or {}).items() if l in fwd]
    if base.get("head_alloc"):
        points.append((fwd[max(fwd)][1], base["head_alloc"]))
    points += [(bwd[l][0], u) for l, u in (base.get("bwd_alloc") or {}).items() if l in bwd]
    below = {k: sum(b for l, b in layer_bytes.items() if l < k) for k in bwd}
    stop = 0.0
    for t1, u in points:
        off = ctx + u - budget
        if off <= 0:
            continue
        for k, (_, t2) in bwd.items():
            if t2 >= t1:
                stop = max(stop, (off - below[k]) / LINK - (t2 - t1))
    return (step + stop) / step


def measure(trace, peak, step, serve, sim=(), spans=None, base=None):
    fwd_end = forward_ends(spans or {})
    base = base or {}
    fwd_alloc = base.get("fwd_alloc")
    ctx = next((int(p.split("=", 1)[1]) for p in sim if p.startswith("SIM_CONTEXT_BYTES=")), 0)
    fig, peaks, times, doc = replay(trace, "AOSHIM_OFFLOAD_LAYERS=all", serve, sim=sim)
    s = doc["summary"]
    nlayers = len(doc["layers"])
    # The activations: what the forward saves in one step (aoshim's count).
    acts = sum(x["tracked_bytes"] for x in doc["layers"]) // fig["steps"]
    layer_bytes = {x["layer"]: x["tracked_bytes"] // fig["steps"] for x in doc["layers"]}
    print(f"activations_per_step_gib={gib(acts)} served_allocs={s['served_allocs']} "
          f"served_from_step={s['served_from_step']}")
    off = s["peak_without_offloading_bytes"] - s["peak_device_bytes"]
    saved = peak - max(peaks[1:]) if len(peaks) > 1 else 0
    print(f"all peak_in_use_gib={gib(max(peaks[1:]))} measuring_step_gib={gib(peaks[0])} "
          f"step_x={median(times[1:]) / step:.2f} saved_gib={gib(saved)} "
          f"off_device_at_peak_gib={gib(off)} saved_share={saved / off if off else 0:.2f} "
          f"(target >= 0.60) late_reloads={fig['late_reloads']}")

    # Every static count: the fastest that keeps a budget is the reference.
    static = {}
    for k in range(1, nlayers):
        fig, peaks, times, _ = replay(trace, f"AOSHIM_OFFLOAD_LAYERS={k}", serve, sim=sim)
        static[k] = (max(peaks[1:]), median(times[1:]))
        print(f"static k={k} peak_in_use_gib={gib(static[k][0])} step_x={static[k][1] / step:.2f}")

    third = int(LINK * step / 3)  # bytes (GB/s = bytes/ns) the link carries in a third of a step
    budgets = [("hidden", peak - third), ("25pct", peak - acts // 4)]
    # The issue's own words: the bytes fit into the forward's time at the
    # link's rate, the forward measured (its layers, from layer 0's start to
    # the last one's end, without offloading). A third of the step is more
    # than that where the head and the optimizer take more than a third
    # (the H200 GPT-2: 30.7 ms of a 110 ms step).
    if fwd_end:
        budgets.insert(1, ("hidden_fwd", peak - int(LINK * fwd_end[max(fwd_end)])))
    for name, budget in budgets:
        hide = peak - budget  # the bytes that must be off the device at the peak
        curve = (ctx, budget, fwd_alloc, base.get("head_alloc")) if fwd_alloc else None
        fig, peaks, times, doc = replay(trace, f"AOSHIM_BUDGET={budget}", serve, sim=sim)
        kept = peaks[-1] <= budget
        best = min((t for p, t in static.values() if p <= budget), default=None)
        # The plan's own figure for the time its copies add, against the
        # last step's: how far the planner's model is from the engine.
        said = re.search(r"copies exposed ([0-9.]+) ms", (doc or {}).get("summary", {}).get("plan") or "")
        # Mappings aoshim made in its last step: physical memory moved
        # between address ranges, about 50 us of the host's each on the H200.
        last = ((doc or {}).get("steps", {}).get("items") or [{}])[-1]
        maps, made = last.get("vmm_mappings", 0), last.get("vmm_handles_made", 0)
        # The same run with the host's virtual-memory calls free (the
        # simulator's SIM_VMM_COST=0; the step without aoshim makes none):
        # how much of what the budget costs is the host's mapping.
        free_x = None
        if name.startswith("hidden"):
            _, _, ftimes, _ = replay(trace, f"AOSHIM_BUDGET={budget}", serve,
                                     sim=tuple(sim) + ("SIM_VMM_COST=0",))
            free_x = ftimes[-1] / step if ftimes else None
        print(f"auto budget={name} budget_gib={gib(budget)} each_step_gib="
              f"{','.join(gib(p) for p in peaks)} kept_last_step={int(kept)} "
              f"steps_over={sum(p > budget for p in peaks)} "
              f"most_over_mib={max([0] + [p - budget for p in peaks]) / 2**20:.1f} "
              f"last_step_x={times[-1] / step:.2f} steps_x_from_4th={median(times[3:]) / step:.2f}"
              + (f" (target <= 1.03) floor_x={floor_x(doc, step, fwd_end or {}, hide, curve=curve):.2f}"
                 f" floor_pool_x={floor_x(doc, step, fwd_end or {}, hide, curve=curve, pool=True):.2f}"
                 f" floor_any_x={floor_x(doc, step, fwd_end or {}, hide, True, curve, True):.2f}"
                 f" floor_bwd_x={floor_bwd_x(step, spans or {}, ctx, budget, base, layer_bytes):.2f}"
                 if name.startswith("hidden") else "")
              + (f" vs_best_static={times[-1] / best:.2f} (target <= 1.10)"
                 if name == "25pct" and best else "")
              + f" exposed_ms={(times[-1] - step) / 1e6:.2f}"
              + f" vmm_ms_per_step={fig.get('vmm_ms_per_step', 0):.1f}"
              + f" mappings_last_step={maps} handles_made_last_step={made}"
              + (f" vmm_free_last_step_x={free_x:.2f}" if free_x else "")
              + (f" plan_exposed_ms={said.group(1)}" if said else ""))


def gpu_traces():
    """The steps recorded on a real GPU in the repository (gpu-check --record,
    and the Hugging Face models beside it): (name, trace, the simulator's
    context pairs). The context is the one gpu-check measured in the same
    folder, or for a folder without, in a sibling (the same device call), or
    a folder's context.json (context_bytes, measured in the same call)."""
    data = os.path.join(ROOT, "tests", "replay", "data")

    def context(folder):
        up = os.path.dirname(folder)
        near = [] if up == data else sorted(os.path.join(up, n) for n in os.listdir(up))
        for d in [folder] + near:
            for n in ("runs.json", "context.json"):  # context.json: a folder's own, measured
                runs = os.path.join(d, n)
                if os.path.exists(runs):
                    with open(runs) as f:
                        doc = json.load(f)
                    return doc.get("context_bytes") or doc["runs"]["base"]["device_base"]
        return None

    out = []
    for top in sorted(os.listdir(data)):
        if not os.path.isdir(os.path.join(data, top)):
            continue
        for name in [top] + sorted(os.path.join(top, n) for n in os.listdir(os.path.join(data, top))):
            folder = os.path.join(data, name)
            trace = os.path.join(folder, "base-record.trace")
            ctx = context(folder) if os.path.exists(trace) else None
            if ctx:
                out.append((name, trace, (f"SIM_CONTEXT_BYTES={ctx}",)))
    return out


def bench(name, trace, sim=()):
    base, bpeaks, btimes, _ = replay(trace, sim=sim)
    peak, step = base["peak_in_use_bytes"], median(btimes[1:])
    print(f"== {name}")
    print(f"without_aoshim peak_in_use_gib={gib(peak)} step_ms={step / 1e6:.2f} "
          f"fwd_in_use_gib={gib(base['fwd_in_use_bytes'])} "
          f"fwd_most_allocated_gib={gib(max((base.get('fwd_alloc') or {0: 0}).values()))}")
    # AOSHIM_SERVE=0: the program's own allocations in its pool beside
    # aoshim's memory; auto (the default): served from aoshim's memory,
    # one pool for both (offload/serve.c), from the first step here (the
    # traces set the pool's release threshold to the maximum, as PyTorch
    # does).
    spans = layer_times(trace, sim)
    for serve in ("0", "auto"):
        print(f"-- AOSHIM_SERVE={serve}")
        measure(trace, peak, step, f"AOSHIM_SERVE={serve}", sim=sim, spans=spans,
                base=base)


def main():
    print(f"forward_peak_model={'x'.join(MODEL[1::2])} steps={STEPS} link_gbps={LINK:.0f}")
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "step.trace")
        record(trace)
        bench("train_step --pytorch, recorded", trace)
    # The same on each real step in the repository whose peak is in the
    # forward or backward (issue 22's "real traces").
    for name, trace, sim in gpu_traces():
        bench(f"{name} (recorded on a GPU)", trace, sim)


if __name__ == "__main__":
    main()
