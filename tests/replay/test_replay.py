#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The replay of step traces, on the hand-made traces of data/, through
scripts/aoshim-replay run (the dispatcher, run.py and the replay program).

  test_replay.py GROUP...   peak, check, broken, errors, late, data, recorded, gpu

Each group is one meson test. The figures a user would check: the replay's
peak against the trace's own sum, worked out here from the trace's text;
races, faults and wrong bytes; the status and exit status of traces that
cannot run; late_reloads against aoshim's own report. Environment (meson):
AO_REPLAY_BUILD (the build directory), AO_REPLAY_TOOL (scripts/aoshim-replay),
AO_REPLAY_DATA (data/), AO_TEST_SHIM (libaoshim.so).
"""
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BUILD = os.environ.get("AO_REPLAY_BUILD", "build")
TOOL = os.environ.get("AO_REPLAY_TOOL", "scripts/aoshim-replay")
DATA = os.environ.get("AO_REPLAY_DATA", "tests/replay/data")
SHIM = os.environ.get("AO_TEST_SHIM", os.path.join(BUILD, "src", "libaoshim.so"))
STEPS = ("step4", "skip4")
failures = []


def data(name):
    return os.path.join(DATA, name + ".trace")


def run(trace, *args, shim=False, env=()):
    """(exit status, figures of the last line, stderr) of one replay."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("AOSHIM_", "SIM_")) and k != "LD_PRELOAD"}
    e["AOSHIM_QUIET"] = "1"  # aoshim's summary is not what these tests read
    cmd = [sys.executable, TOOL, "run", trace, "--build", BUILD, *args]
    if shim:
        cmd += ["--shim", SHIM]
    cmd += [f"{k}={v}" for k, v in env]
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=120)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    if not last.startswith("replay status="):
        raise AssertionError(f"{' '.join(cmd)}: no replay line last\n{p.stdout}\n{p.stderr}")
    fig = {}
    for w in last.split()[1:]:
        k, v = w.split("=", 1)
        fig[k] = int(v) if v.isdigit() else v
    print(f"  {os.path.basename(trace)} {' '.join(args)}{' (aoshim)' if shim else ''}: {last}")
    return p.returncode, fig, p.stderr


def run_report(trace, *args, shim=True, env=()):
    """run() with aoshim's JSON report: (exit status, figures, stderr, its summary)."""
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "r.json")
        rc, fig, err = run(trace, *args, shim=shim, env=list(env) + [("AOSHIM_REPORT", rep)])
        with open(rep) as f:
            doc = json.load(f)
    return rc, fig, err, doc


def report_true(doc, fig, without, what, ctx=0):
    """aoshim's report by the driver's count: its peak is the simulator's
    (sampled: within 0.5%, never above), and its peak without offloading
    within 3% of the replay without aoshim (without: that run's figures),
    served or not: the program's pool, with its fragments, is modelled
    (src/mem/poolmodel.h; ctx: the context, for the pool's fragments shown).
    It says MORE, or that it may have used more, when the run held more,
    and not the latter when it held no more."""
    s = doc["summary"]
    dev, dw, real = s["device_peak_bytes"], s["device_peak_without_bytes"], fig["peak_in_use_bytes"]
    truth = without["peak_in_use_bytes"]
    frag = max(0, truth - without["peak_device_bytes"] - ctx)
    print(f"    {what}: report {dev / 2**30:.2f} GiB at peak (replay {real / 2**30:.2f}), "
          f"{dw / 2**30:.2f} without offloading, {s.get('device_without_model')} "
          f"(replay without aoshim {truth / 2**30:.2f}, {dw / truth:.3f}x; its pool's fragments "
          f"{frag / 2**30:.2f})")
    expect(0.995 * real <= dev <= real, f"{what}: report's device peak {dev}, the replay's {real}")
    expect(0.97 * truth <= dw <= 1.03 * truth,
           f"{what}: report's peak without offloading {dw}, the replay without aoshim {truth}")
    more = real > without["peak_in_use_bytes"] * 1.03
    expect(not more or s["device_more_bytes"] > 0 or s["device_maybe_more_bytes"] > 0,
           f"{what}: held more, the report says saved")
    expect(real > without["peak_in_use_bytes"] or s["device_maybe_more_bytes"] == 0,
           f"{what}: held no more, the report says it may have: {s['device_maybe_more_bytes']}")


def expect(cond, what):
    if not cond:
        failures.append(what)
        print(f"  FAIL: {what}")


def each_step(err):
    """The replay's peak in use of each step (its stderr line), or []."""
    m = re.search(r"peak_in_use_bytes of each step:((?: \d+)+)", err)
    return [int(v) for v in m.group(1).split()] if m else []


def open_trace(path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt") if gz else open(path)


def trace_records(path, kinds):
    """The trace's records of those kinds, (kind, fields), in the order the
    program made them (t=, file order among equals)."""
    recs = []
    with open_trace(path) as f:
        for text in f:
            w = text.split()
            if not w or w[0] not in kinds:
                continue
            kv = dict(x.split("=", 1) for x in w[1:])
            recs.append((int(kv.get("t", 0)), len(recs), w[0], kv))
    return [(kind, kv) for _, _, kind, kv in sorted(recs, key=lambda r: r[:2])]


def trace_peak(path):
    """The most the trace had allocated at once: its alloc and free records,
    in the order the program made them."""
    live, cur, peak = {}, 0, 0
    for kind, kv in trace_records(path, ("alloc", "free")):
        if kind == "alloc":
            live[kv["addr"]] = int(kv["size"])
            cur += int(kv["size"])
            peak = max(peak, cur)
        else:
            cur -= live.pop(kv["addr"])
    return peak


def trace_layer_most(path):
    """The most the trace had allocated in each forward layer (from its
    begin record to its end, the most over microbatches), in each backward
    layer (backward_begin to backward_end) and in the head (from the
    forward's last end record to the step's first backward_begin), of its
    last step: ({layer: bytes}, {layer: bytes}, bytes), as the trace's alloc
    and free records add up."""
    live, cur = {}, 0
    fwd_now, bwd_now, fwd_last, bwd_last = {}, {}, {}, {}
    head_now = head_step = head_last = 0  # the head's running most; its most this step; last step's
    fwd = bwd = None
    head = bwd_seen = False
    for kind, kv in trace_records(path, ("alloc", "free", "layer")):
        op = kv.get("op")
        if kind == "alloc":
            live[kv["addr"]] = int(kv["size"])
            cur += int(kv["size"])
        elif kind == "free":
            cur -= live.pop(kv["addr"])
        elif op == "begin":
            fwd, head = int(kv["layer"]), False
        elif op == "end":
            fwd, head, head_now = None, not bwd_seen, 0
        elif op == "backward_begin":
            if head:
                head_step = head_now
            bwd, head, bwd_seen = int(kv["layer"]), False, True
        elif op == "backward_end":
            bwd_now[bwd] = max(bwd_now.get(bwd, 0), cur)
            bwd = None
        elif op == "step_end":
            fwd_last, bwd_last, head_last = fwd_now, bwd_now, head_step
            fwd_now, bwd_now, head_step, bwd_seen = {}, {}, 0, False
        if fwd is not None:
            fwd_now[fwd] = max(fwd_now.get(fwd, 0), cur)
        if bwd is not None:
            bwd_now[bwd] = max(bwd_now.get(bwd, 0), cur)
        if head:
            head_now = max(head_now, cur)
    return fwd_last, bwd_last, head_last


def layer_most(err):
    """The replay's most allocated in each forward and backward layer and in
    the head of its last step."""
    out = []
    for what in ("forward", "backward"):
        m = re.search(rf"most allocated_bytes in each {what} layer of the last step:((?: \d+:\d+)+)",
                      err)
        out.append({int(k): int(v) for k, v in (w.split(":") for w in m.group(1).split())} if m else {})
    m = re.search(r"most allocated_bytes from the forward's last layer to the backward of the last "
                  r"step: (\d+)", err)
    return out[0], out[1], int(m.group(1)) if m else 0


def step_durations(path):
    """The dur= of every launch between the first phase record and step_end."""
    total, inside = 0, False
    with open(path) as f:
        for text in f:
            if text.startswith("phase "):
                inside = True
            if text.startswith("layer ") and "op=step_end" in text:
                break
            m = re.search(r" dur=(\d+)", text)
            if inside and text.startswith("launch ") and m:
                total += int(m.group(1))
    return total


def ok_clean(fig, what):
    expect(fig.get("status") == "ok", f"{what}: status {fig.get('status')}")
    expect(fig.get("races") == 0, f"{what}: races {fig.get('races')}")
    expect(fig.get("faults") == 0, f"{what}: faults {fig.get('faults')}")


# --- the groups ------------------------------------------------------------------------------
def group_peak():
    """Without aoshim: the trace's own peak, exactly; a step that lasts its
    durations; a gzip trace as the plain one; --steps makes the setup once."""
    for name in STEPS:
        path = data(name)
        rc, fig, err = run(path)
        ok_clean(fig, name)
        expect(rc == 0, f"{name}: exit {rc}")
        want = trace_peak(path)
        expect(fig["peak_device_bytes"] == want,
               f"{name}: peak_device_bytes {fig['peak_device_bytes']}, the trace's {want}")
        expect(fig["peak_in_use_bytes"] >= want,
               f"{name}: peak_in_use_bytes {fig['peak_in_use_bytes']} below the allocated {want}")
        expect(0 < fig["fwd_in_use_bytes"] <= fig["peak_in_use_bytes"],
               f"{name}: fwd_in_use_bytes {fig['fwd_in_use_bytes']}")
        expect(fig["late_reloads"] == 0, f"{name}: late_reloads {fig['late_reloads']} without aoshim")
        # The most allocated in each forward and backward layer and in the
        # head of the last step (a bench's floors read them): the trace's
        # own sums, layer by layer.
        want_most = trace_layer_most(path)
        expect(want_most[0] and want_most[1] and layer_most(err) == want_most,
               f"{name}: most allocated in each forward layer, backward layer and the head "
               f"{layer_most(err)}, the trace's {want_most}")
        # One compute stream: the step lasts at least its kernels' durations
        # (the kernels without dur= add the replay's model on top).
        durs = step_durations(path)
        expect(durs <= fig["step_ns"] <= durs * 1.2,
               f"{name}: step_ns {fig['step_ns']}, its launches' dur= add up to {durs}")
        with tempfile.TemporaryDirectory() as d:
            gz = os.path.join(d, name + ".trace.gz")
            with open(path, "rb") as f, gzip.open(gz, "wb") as g:
                shutil.copyfileobj(f, g)
            _, zfig, _ = run(gz)
            expect(zfig == fig, f"{name}: the gzip trace gives {zfig}, the plain one {fig}")
        rc, fig3, _ = run(path, "--steps", "3")
        ok_clean(fig3, f"{name} --steps 3")
        expect(fig3["steps"] == 3, f"{name} --steps 3: steps={fig3['steps']}")
        expect(fig3["peak_device_bytes"] == want,
               f"{name} --steps 3: peak_device_bytes {fig3['peak_device_bytes']}, want {want}")


    # Every entry point (apis.trace): cudaMalloc, cuMemAlloc, cuMemCreate
    # counted by its size, the pools, pageable and synchronous copies.
    rc, fig, err = run(data("apis"))
    ok_clean(fig, "apis")
    want = trace_peak(data("apis"))
    expect(fig["peak_device_bytes"] == want,
           f"apis: peak_device_bytes {fig['peak_device_bytes']}, the trace's {want}")
    rc, fig3, err3 = run(data("apis"), "--steps", "3")
    ok_clean(fig3, "apis --steps 3")
    expect(fig3["peak_device_bytes"] == want and fig3["steps"] == 3,
           f"apis --steps 3: {fig3}")
    skipped = [x for x in (err + err3).splitlines()
               if x.startswith("replay: note:") and "cuMemPoolCreate" not in x]
    expect(not skipped, f"apis: the replay skipped something: {skipped}")


def group_check():
    """--check: every sampled byte read back as written, without aoshim and
    with every layer offloaded; and aoshim did offload (else the check is
    vacuous)."""
    for name in STEPS:
        rc, fig, _ = run(data(name), "--check")
        ok_clean(fig, f"{name} --check")
        expect(fig.get("wrong") == 0, f"{name} --check: wrong={fig.get('wrong')}")
        with tempfile.TemporaryDirectory() as d:
            rep = os.path.join(d, "report.json")
            rc, fig, _ = run(data(name), "--check", shim=True,
                             env=[("AOSHIM_OFFLOAD_LAYERS", "all"), ("AOSHIM_REPORT", rep)])
            ok_clean(fig, f"{name} --check under aoshim")
            expect(fig.get("wrong") == 0, f"{name} --check under aoshim: wrong={fig.get('wrong')}")
            s = json.load(open(rep))["summary"]
            expect(s["offloaded_bytes"] > 0 and s["reloaded_bytes"] > 0,
                   f"{name} under aoshim: offloaded {s['offloaded_bytes']}, "
                   f"reloaded {s['reloaded_bytes']}: nothing moved")
        rc, fig, _ = run(data(name), "--check", "--scale", "64", "--steps", "2")
        ok_clean(fig, f"{name} --check --scale 64")
        expect(fig.get("wrong") == 0 and fig.get("scale") == 64 and fig["steps"] == 2,
               f"{name} --check --scale 64 --steps 2: {fig}")
        # At scale, aoshim's size threshold scales too (run.py): it still moves.
        with tempfile.TemporaryDirectory() as d:
            rep = os.path.join(d, "report.json")
            rc, fig, _ = run(data(name), "--check", "--scale", "64", shim=True,
                             env=[("AOSHIM_OFFLOAD_LAYERS", "all"), ("AOSHIM_REPORT", rep)])
            ok_clean(fig, f"{name} --check --scale 64 under aoshim")
            expect(fig.get("wrong") == 0, f"{name} --scale 64 under aoshim: wrong={fig.get('wrong')}")
            s = json.load(open(rep))["summary"]
            expect(s["offloaded_bytes"] > 0, f"{name} --scale 64 under aoshim: nothing offloaded")


def group_broken():
    """A kernel that reads memory its allocation freed: the simulator faults
    (with aoshim too, AOSHIM_CHECK=1; without it, a race); once the memory
    is someone else's, only --check sees it."""
    rc, fig, err = run(data("uaf_fault"))
    expect(rc == 86 and fig["status"] == "fault" and fig["faults"] >= 1,
           f"uaf_fault: exit {rc}, {fig}")
    expect("read_after_free" in err, "uaf_fault: the fault does not name the kernel")
    rc, fig, _ = run(data("uaf_fault"), shim=True,
                     env=[("AOSHIM_CHECK", "1"), ("AOSHIM_OFFLOAD_LAYERS", "all")])
    expect(rc == 86 and fig["status"] == "fault" and fig["faults"] >= 1,
           f"uaf_fault under aoshim (AOSHIM_CHECK=1): exit {rc}, {fig}")
    # Without AOSHIM_CHECK aoshim keeps the freed memory mapped (the read
    # works), but the read is still not ordered before its unmap: a race.
    rc, fig, _ = run(data("uaf_fault"), "--check", shim=True,
                     env=[("AOSHIM_OFFLOAD_LAYERS", "all")])
    expect(fig["faults"] + fig["races"] + fig.get("wrong", 0) > 0,
           f"uaf_fault under aoshim: not caught (exit {rc}, {fig})")
    rc, fig, err = run(data("uaf_reuse"), "--check")
    expect(rc == 0 and fig["status"] == "ok" and fig["wrong"] > 0,
           f"uaf_reuse --check: wrong={fig.get('wrong')} (a stale read must be wrong)")
    expect(fig["faults"] == 0 and fig["races"] == 0, f"uaf_reuse: {fig}")
    expect("read_after_free" in err, "uaf_reuse: the wrong bytes do not name the kernel")


def group_errors():
    """Traces that cannot run: the line says why, exit status 2."""
    with tempfile.TemporaryDirectory() as d:
        def write(name, text):
            p = os.path.join(d, name)
            with open(p, "w") as f:
                f.write(text)
            return p

        cases = [
            (data("bad_header"), "bad_header"),
            (write("empty.trace", ""), "bad_header"),
            (write("v2.trace", "aoshim-trace 2\nend t=0\n"), "bad_version"),
            (write("nosize.trace", "aoshim-trace 1\nalloc t=0 api=cudaMalloc addr=0x1000\n"),
             "bad_trace"),
            (write("badapi.trace", "aoshim-trace 1\nalloc t=0 api=malloc size=1 addr=0x1000\n"),
             "bad_trace"),
            (os.path.join(d, "missing.trace"), "no_trace"),
        ]
        for path, status in cases:
            rc, fig, err = run(path)
            expect(rc == 2 and fig["status"] == status,
                   f"{os.path.basename(path)}: exit {rc}, status {fig['status']}, want {status}")
            expect("error:" in err, f"{os.path.basename(path)}: no error line on stderr")
        # A minor version and what it adds (unknown kinds and fields) replay.
        p = write("v1.3.trace", "aoshim-trace 1.3\nfuture_kind a=1\nstream id=2 flags=1 prio=0 "
                  "colour=blue\nalloc t=0 api=cudaMallocAsync s=2 size=1048576 addr=0x1000\n"
                  "free t=1 api=cudaFreeAsync s=2 addr=0x1000\n")
        rc, fig, _ = run(p)
        expect(rc == 0 and fig["status"] == "ok" and fig["peak_device_bytes"] == 1048576,
               f"v1.3.trace: exit {rc}, {fig}")


def group_late():
    """late_reloads is aoshim's report's summary.late_reloads: the long skip
    of skip4 reloads layer 0 outside the schedule; step4 has none."""
    for name, late in (("skip4", True), ("step4", False)):
        with tempfile.TemporaryDirectory() as d:
            rep = os.path.join(d, "report.json")
            rc, fig, err = run(data(name), shim=True,
                               env=[("AOSHIM_OFFLOAD_LAYERS", "all"), ("AOSHIM_REPORT", rep)])
            ok_clean(fig, f"{name} under aoshim")
            s = json.load(open(rep))["summary"]
            expect(fig["late_reloads"] == s["late_reloads"],
                   f"{name}: late_reloads={fig['late_reloads']}, the report's {s['late_reloads']}")
            expect((fig["late_reloads"] > 0) == late, f"{name}: late_reloads={fig['late_reloads']}")
            if late:
                expect("ampere_bf16_s16816gemm_bf16_64x64_nn" in err,
                       f"{name}: the late-reload warning does not name the trace's kernel")
        # The run.py's own temporary report, when none is given.
        rc, fig2, _ = run(data(name), shim=True, env=[("AOSHIM_OFFLOAD_LAYERS", "all")])
        expect(fig2["late_reloads"] == fig["late_reloads"],
               f"{name}: late_reloads {fig2['late_reloads']} through run.py's report, "
               f"{fig['late_reloads']} through the given one")
    # The default stream, as PyTorch names it to aoshim_set_stream (its
    # current_stream().cuda_stream is 0) and as the launches on it arrive
    # (the legacy stream): one stream, so a complete schedule has no late
    # reload. The H200's 21 late reloads per reload were these two names of
    # one stream, counted apart.
    raw = open(data("step4"), "rb").read()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, "step4-default-stream.trace")
        with open(t, "w") as f:
            f.write(text.replace(" s=2", " s=0"))
        rc, fig, _ = run(t, shim=True, env=[("AOSHIM_OFFLOAD_LAYERS", "all")])
        ok_clean(fig, "step4 on the default stream under aoshim")
        expect(fig["late_reloads"] == 0,
               f"step4 on the default stream: late_reloads={fig['late_reloads']}")
        # One name for the stream must never mean a wait skipped: the bytes
        # every kernel reads back are the ones written (and no race).
        rc, fig, _ = run(t, "--check", shim=True, env=[("AOSHIM_OFFLOAD_LAYERS", "all")])
        ok_clean(fig, "step4 on the default stream under aoshim, --check")
        expect(fig.get("wrong") == 0,
               f"step4 on the default stream under aoshim: wrong={fig.get('wrong')}")

    # Two integers packed in a parameter word, inside a live allocation (the
    # H200's device addresses begin at 12 GiB; GPT-2's cutlass gemm held
    # (6, 4), 0x400000006, in every launch): no pointer, so no touch of the
    # layer its value falls in (replay.c, packed_pair). Layer 0 saves a
    # buffer at a 4 GiB boundary; a kernel in layer 3 (layer 0 is away
    # under all) holds the pair that falls in it, as a raw word, in each of
    # its two launches. Taken as a pointer, it reloaded layer 0 late.
    pair = text.replace(
        "launch t=62000 ",
        "alloc t=61000 api=cudaMallocAsync s=2 size=8388608 addr=0x7f0100000000\n"
        "memset t=61500 s=2 dst=0x7f0100000000 n=8388608 value=1\n"
        "launch t=62000 ").replace(
        "launch t=131000 ",
        "launch t=128000 k=1 s=2 grid=1,1,1 block=32,1,1 ptr=0x7f0100000006\n"
        "launch t=129000 k=1 s=2 grid=1,1,1 block=32,1,1 ptr=0x7f0100000006\n"
        "launch t=131000 ").replace(
        "layer t=222000 op=backward_end layer=0 s=2",
        "layer t=222000 op=backward_end layer=0 s=2\n"
        "free t=222500 api=cudaFreeAsync s=2 addr=0x7f0100000000")
    expect(pair.count("0x7f0100000006") == 2, "step4 with a packed pair: the text did not take it")
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, "step4-packed-pair.trace")
        with open(t, "w") as f:
            f.write(pair)
        rc, fig, err = run(t, shim=True, env=[("AOSHIM_OFFLOAD_LAYERS", "all")])
        ok_clean(fig, "step4 with a packed pair under aoshim")
        expect(fig["late_reloads"] == 0,
               f"step4 with a packed pair: late_reloads={fig['late_reloads']}")
        expect("2 raw launch parameter words in allocations were left out" in err,
               f"step4 with a packed pair: no note of the two words left out:\n{err[-1500:]}")


def side_touch(text, layer, at_backward_of):
    """step4's text with a kernel on the side stream (3) that reads layer's
    first buffer as at_backward_of's backward begins, ordered after stream 2
    and back (an event each way): a touch outside the schedule."""
    lines = text.split("\n")
    i = next(k for k, l in enumerate(lines) if f"op=begin layer={layer} " in l + " ")
    addr = next(re.search(r"addr=(0x[0-9a-f]+)", l).group(1)
                for l in lines[i:] if l.startswith("alloc"))
    j = next(k for k, l in enumerate(lines) if f"op=backward_begin layer={at_backward_of} " in l + " ")
    t = re.search(r"t=(\d+)", lines[j]).group(1)
    lines[j + 1:j + 1] = [f"record t={t} ev=1 s=2", f"wait t={t} ev=1 s=3",
                          f"launch t={t} k=3 s=3 grid=1024,1,1 block=256,1,1 dur=1000 "
                          f"ptr={addr}+{8 << 20}:r",
                          f"record t={t} ev=2 s=3", f"wait t={t} ev=2 s=2"]
    return "\n".join(lines)


def group_under_way():
    """A touch of an offloaded layer before the schedule reloads it is a late
    reload; one while the schedule's reload is on the link waits for it and
    is counted apart (summary.reload_under_way_waits), not as late."""
    raw = open(data("step4"), "rb").read()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    # Under all, layers 0 and 1 go; layer 0 comes back as layer 2's backward
    # begins (prefetch), so at layer 3's it is still away.
    for at, late in ((3, True), (2, False)):
        with tempfile.TemporaryDirectory() as d:
            t = os.path.join(d, f"step4-side-touch-{at}.trace")
            with open(t, "w") as f:
                f.write(side_touch(text, 0, at))
            rc, fig, _, doc = run_report(t, "--check", env=[("AOSHIM_OFFLOAD_LAYERS", "all")])
            ok_clean(fig, f"step4, layer 0 read on the side stream at layer {at}'s backward")
            s = doc["summary"]
            print(f"    layer 0 read at layer {at}'s backward: late {s['late_reloads']}, "
                  f"waited for a reload under way {s['reload_under_way_waits']}")
            expect(fig.get("wrong") == 0, f"side touch at {at}: wrong={fig.get('wrong')}")
            if late:
                expect(s["late_reloads"] > 0 and s["reload_under_way_waits"] == 0,
                       f"side touch at {at}: {s['late_reloads']} late, "
                       f"{s['reload_under_way_waits']} under way (want late only)")
            else:
                expect(s["late_reloads"] == 0 and s["reload_under_way_waits"] > 0,
                       f"side touch at {at}: {s['late_reloads']} late, "
                       f"{s['reload_under_way_waits']} under way (want under way only)")
            rc, fig, _ = run(t, "--check")
            ok_clean(fig, f"step4 side touch at {at} without aoshim")


def group_data():
    """Every trace of data/ and its folders (the real steps) but the
    deliberately broken ones (uaf_*, bad_*):
    --check with and without aoshim (AOSHIM_OFFLOAD_LAYERS=all), ok, no
    wrong byte, no race, no fault. A trace of more than 512 MiB is checked
    at a --scale that brings it under (the real steps are tens of GiB)."""
    names = sorted(os.path.relpath(os.path.join(d, n), DATA)
                   for d, _, files in os.walk(DATA) for n in files
                   if n.endswith((".trace", ".trace.gz")) and not n.startswith(("uaf_", "bad_")))
    expect(names, "no trace in data/")
    for n in names:
        path = os.path.join(DATA, n)
        scale = max(1, -(-trace_peak(path) // (512 << 20)))
        args = ["--check"] + (["--scale", str(scale)] if scale > 1 else [])
        for shim in (False, True):
            env = [("AOSHIM_OFFLOAD_LAYERS", "all")] if shim else []
            rc, fig, _ = run(path, *args, shim=shim, env=env)
            what = f"{n} {' '.join(args)}{' under aoshim' if shim else ''}"
            ok_clean(fig, what)
            expect(rc == 0 and fig.get("wrong") == 0, f"{what}: exit {rc}, wrong={fig.get('wrong')}")


def paced_trace(d, gap_ns, launches=10, device="NVIDIA%20H200", meta=""):
    """A recorded step of `launches` 10 us kernels, the program's host work
    between two launches gap_ns (their t= that far apart), then a
    synchronisation 50 ms later (the GPU's time, not the host's). meta: more
    fields of the meta line."""
    end = 2000 + launches * gap_ns
    lines = ["aoshim-trace 1",
             f"meta source=record program=hand-made{meta} device={device} total=85899345920",
             "stream id=2 flags=1 prio=0", "kernel id=1 name=write_buffer",
             "alloc t=1000 api=cudaMallocAsync s=2 size=4194304 addr=0x7f0000000000"]
    lines += [f"launch t={2000 + i * gap_ns} k=1 s=2 grid=1,1,1 block=128,1,1 dur=10000 "
              f"ptr=0x7f0000000000+4194304:w" for i in range(launches)]
    lines += [f"sync t={end + 50_000_000} what=device", f"layer t={end + 50_000_100} op=step_end",
              f"free t={end + 50_000_200} api=cudaFreeAsync s=2 addr=0x7f0000000000",
              f"end t={end + 50_000_300}"]
    t = os.path.join(d, "paced.trace")
    with open(t, "w") as f:
        f.write("\n".join(lines) + "\n")
    return t


def group_recorded():
    """A train_step step recorded with AOSHIM_RECORD (record only, and under
    'all' offloading, and PyTorch-like), replayed without aoshim: the same
    allocation-level peak and the same number of kernel launches as the run
    that was recorded. Two threads' blocks out of order in the file
    (threads.trace) are issued in t= order.

    The host's pace: a trace recorded on a GPU is replayed with the
    program's host work between its calls (t= gaps less the call's own
    cost), so ten launches 1 ms apart take 9 ms or more of host time where
    the GPU needs 0.1 ms, and a synchronisation's gap (the GPU's wait) is no
    host work. --no-host-pace, a trace the simulated GPU recorded and one
    recorded under aoshim (enable=1) issue the calls at the simulator's own
    cost."""
    with tempfile.TemporaryDirectory() as d:
        t = paced_trace(d, 1_000_000)
        rc, fig, err = run(t)
        ok_clean(fig, "paced.trace")
        expect(rc == 0 and 9_000_000 <= fig["step_ns"] < 12_000_000,
               f"paced.trace: step_ns {fig['step_ns']}, want 9 to 12 ms (ten launches 1 ms apart; "
               f"the 50 ms before the sync are the GPU's)")
        expect("replay: the program's own host work between its calls, from the trace's t=: 9." in err,
               err)
        rc, fig, err = run(t, "--no-host-pace")
        expect(rc == 0 and fig["step_ns"] < 1_000_000,
               f"paced.trace --no-host-pace: step_ns {fig['step_ns']}, want under 1 ms")
        t = paced_trace(d, 1_000_000, device="simgpu%20H100%20(simulated)")
        rc, fig, err = run(t)
        expect(rc == 0 and fig["step_ns"] < 1_000_000,
               f"paced.trace recorded on the simulated GPU: step_ns {fig['step_ns']}, want under 1 ms")
        # Recorded under aoshim: its gaps hold that aoshim's host time.
        rc, fig, err = run(paced_trace(d, 1_000_000, meta=" enable=1"))
        expect(rc == 0 and fig["step_ns"] < 1_000_000,
               f"paced.trace recorded under aoshim: step_ns {fig['step_ns']}, want under 1 ms")
    rc, fig, err = run(data("threads"))
    ok_clean(fig, "threads.trace")
    expect(rc == 0 and fig["peak_device_bytes"] == 4 << 20, f"threads.trace: exit {rc}, {fig}")
    expect("1 records were issued earlier than their place in the file" in err, err)
    expect("did not make" not in err and "allocated over them" not in err,
           f"threads.trace issued in file order:\n{err}")
    ts = os.environ["AO_TRAIN_STEP"]
    sim = os.path.join(BUILD, "tests", "sim")
    for args, aoenv in ((["--nodata"], [("AOSHIM_ENABLE", "0")]),
                        (["--nodata"], [("AOSHIM_OFFLOAD_LAYERS", "all")]),
                        (["--nodata", "--pytorch"], [("AOSHIM_ENABLE", "0")])):
        with tempfile.TemporaryDirectory() as d:
            tr = os.path.join(d, "step.trace")
            e = {k: v for k, v in os.environ.items()
                 if not k.startswith(("AOSHIM_", "SIM_")) and k != "LD_PRELOAD"}
            e.update(dict(aoenv), AOSHIM_RECORD=tr, AOSHIM_QUIET="1", LD_PRELOAD=SHIM,
                     LD_LIBRARY_PATH=sim)
            p = subprocess.run([ts, "--steps", "1", *args], env=e, capture_output=True,
                               text=True, timeout=120)
            what = f"train_step {' '.join(args)} {aoenv}"
            status = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            m = re.search(r"alloc_peak_bytes=(\d+)", status)
            launches = re.search(r"^simgpu: .* launches=(\d+)", p.stderr, re.M)
            expect(p.returncode == 0 and m and launches, f"{what}: {status} {p.stderr[-300:]}")
            if not (m and launches):
                continue
            rc, fig, err = run(tr)
            ok_clean(fig, f"{what}, replayed")
            expect(fig["peak_device_bytes"] == int(m.group(1)),
                   f"{what}: replay's peak {fig['peak_device_bytes']}, the run's {m.group(1)}")
            rl = re.search(r"^simgpu: .* launches=(\d+)", err, re.M)
            expect(rl and rl.group(1) == launches.group(1),
                   f"{what}: replay launched {rl.group(1) if rl else '?'}, the run "
                   f"{launches.group(1)}")


def gpu_dirs():
    """The folders of data/ recorded on a real GPU: base-record.trace beside
    runs.json (gpu-check --record, or a program of its own like it)."""
    return sorted(os.path.join(DATA, n) for n in os.listdir(DATA)
                  if os.path.isfile(os.path.join(DATA, n, "runs.json"))
                  and os.path.isfile(os.path.join(DATA, n, "base-record.trace")))


def plan_layers(text):
    """'layers 0-5 of 16 offloaded' of aoshim's plan line, or None."""
    m = re.findall(r"offload plan\s+(layers [\d, -]+ of \d+ offloaded|nothing offloaded)", text)
    return m[-1] if m else None


def group_gpu():
    """The steps recorded on a real GPU (gpu-check --record: base-record.trace
    and the figures of its runs in runs.json), replayed at that GPU's link
    rate, against what the GPU measured: the program's peak of live bytes
    (aoshim's own count there), the device's memory in use by the driver's
    count (less what was in use before the model: the context), the step
    time, and under aoshim the late reloads, the memory and the plan."""
    dirs = gpu_dirs()
    expect(dirs, "no folder of data/ holds a trace recorded on a GPU")
    for d in dirs:
        name = os.path.basename(d)
        with open(os.path.join(d, "runs.json")) as f:
            doc = json.load(f)
        runs = doc["runs"]
        auto = os.path.join(d, "auto.report.json.gz")
        need = None
        if os.path.exists(auto):
            with gzip.open(auto, "rt") as f:
                need = json.load(f)["summary"]["peak_device_bytes"]
        tr = os.path.join(d, "base-record.trace")
        link = ("--link", "55")  # the H200's link, measured with 1 GiB pinned copies

        # The context's memory: what the GPU had in use before the model.
        ctx = [("SIM_CONTEXT_BYTES", str(doc.get("context_bytes") or runs["base"]["device_base"]))]

        def used(kind):  # the GPU's device peak, the driver's count
            return runs[kind]["device_peak"]

        def near(fig, key, gpu, tol, what):
            r = fig[key] / gpu
            print(f"    {what}: replay {fig[key] / 2**30 if 'bytes' in key else fig[key] / 1e6:.2f}, "
                  f"GPU {gpu / 2**30 if 'bytes' in key else gpu / 1e6:.2f} ({r:.3f}x)")
            expect(abs(r - 1) <= tol, f"{name} {what}: replay {fig[key]}, GPU {gpu} ({r:.3f}x, "
                                      f"{tol * 100:.0f}% allowed)")

        rc, fig, _ = run(tr, *link, env=ctx)
        base = fig
        ok_clean(fig, f"{name} without aoshim")
        expect(rc == 0 and fig["steps"] == len(runs["base"]["losses"]), f"{name}: exit {rc}, {fig}")
        # Two steps more than the trace has: its last step again, with what
        # one step hands the next (the loss read after the step's end) bound
        # across (replay.c: carried); the steps again are the last one's.
        n = fig["steps"]
        rc, more, err = run(tr, *link, "--steps", str(n + 2), env=ctx)
        ok_clean(more, f"{name} --steps {n + 2}")
        each = each_step(err)
        expect(more["steps"] == n + 2 and len(each) == n + 2 and each[-1] == each[-2] == each[n - 1],
               f"{name} --steps {n + 2}: {more}, each step {each}")
        if need:  # aoshim's count of the step on the GPU, under auto
            near(fig, "peak_device_bytes", need, 0.005, "live bytes at the peak (GiB)")
        near(fig, "peak_in_use_bytes", used("base"), 0.05, "in use by the driver's count (GiB)")
        near(fig, "step_ns", runs["base"]["median_s"] * 1e9, 0.25, "step time (ms)")

        # Under all: the trace the run under all recorded (its addresses are
        # aoshim's), with the leftover words given to aoshim's scan as it saw
        # them on the GPU, and aoshim as it was there (every word a possible
        # pointer, the program's own allocations in its pool): the same late
        # reloads, and the memory.
        with gzip.open(os.path.join(d, "all.report.json.gz"), "rt") as f:
            late = json.load(f)["summary"]["late_reloads"]
        at = os.path.join(d, "all.trace")
        rc, fig, _ = run(at, *link, "--scan-leftovers", shim=True,
                         env=ctx + [("AOSHIM_OFFLOAD_LAYERS", "all"),
                                    ("AOSHIM_SKIP_LEFTOVERS", "0"), ("AOSHIM_SERVE", "0")])
        ok_clean(fig, f"{name} under all")
        print(f"    under all, late reloads: replay {fig['late_reloads']}, GPU {late}")
        expect(fig["late_reloads"] == late,
               f"{name} under all: {fig['late_reloads']} late reloads, the GPU {late}")
        near(fig, "peak_in_use_bytes", used("all"), 0.05, "under all, in use (GiB)")
        near(fig, "step_ns", runs["all"]["median_s"] * 1e9, 0.25, "under all, step time (ms)")
        was = fig
        # The same with aoshim's scan learning the leftovers' places
        # (src/offload/scan.h): none of its late reloads is in the steady
        # state (from the third step on), no more than before, and the
        # memory no higher.
        def under_all(what, *env):
            """The recorded step under all, leftovers learned, and the report
            true: (figures, report, late reloads of each step)."""
            rc, fig, _, doc = run_report(at, *link, "--scan-leftovers",
                                         env=ctx + [("AOSHIM_OFFLOAD_LAYERS", "all"), *env])
            ok_clean(fig, f"{name} {what}")
            report_true(doc, fig, base, f"{name} {what}", int(ctx[0][1]))
            return fig, doc, [s.get("late_reloads", 0) for s in doc["steps"]["items"]]

        fig, doc, per_step = under_all("under all, beside the pool", ("AOSHIM_SERVE", "0"))
        print(f"    under all, leftovers learned: late reloads {fig['late_reloads']} "
              f"(each step: {per_step}), {doc['summary']['leftover_skips']} words not read as "
              f"touches; in use {fig['peak_in_use_bytes'] / 2**30:.2f} GiB against "
              f"{was['peak_in_use_bytes'] / 2**30:.2f}")
        expect(not any(per_step[2:]) and fig["late_reloads"] <= was["late_reloads"],
               f"{name}: leftovers learned, late reloads per step {per_step}")
        expect(fig["peak_in_use_bytes"] <= was["peak_in_use_bytes"],
               f"{name}: leftovers learned, in use {fig['peak_in_use_bytes']} against "
               f"{was['peak_in_use_bytes']}")
        learned = fig
        # Served (offload/serve.c): the program's own allocations from
        # aoshim's memory, one pool with the layers': less in use than
        # beside the program's pool, no late reload after the second step,
        # and the report true. The default (AOSHIM_SERVE=auto) serves from
        # the first step: the trace sets the pool's release threshold to
        # the maximum, as PyTorch does.
        fig, doc, per_step = under_all("under all, served")
        acts = sum(x["tracked_bytes"] for x in doc["layers"]) // fig["steps"]
        print(f"    under all, served: in use {fig['peak_in_use_bytes'] / 2**30:.2f} GiB "
              f"(beside the program's pool {learned['peak_in_use_bytes'] / 2**30:.2f}), "
              f"{doc['summary']['served_allocs']} allocations served from step "
              f"{doc['summary']['served_from_step']}, late reloads {per_step}, "
              f"step {fig['step_ns'] / 1e6:.2f} ms (beside the pool {learned['step_ns'] / 1e6:.2f})")
        # Late reloads from the fourth step: with a handle per chunk
        # (mem/vmm.c) the layout moved, and in the third step one of the
        # words the H200's scan saw as leftovers (this trace's addresses are
        # that run's) falls in layer 2's chunk while it reloads (a where
        # kernel: 15 buffers waited for). Not learned as a leftover: in the
        # steps before, it fell in a live allocation.
        expect(fig["peak_in_use_bytes"] < learned["peak_in_use_bytes"] and
               doc["summary"]["served_allocs"] > 0 and doc["summary"]["served_from_step"] == 0 and
               not any(per_step[3:]),
               f"{name} under all, served: in use {fig['peak_in_use_bytes']} against "
               f"{learned['peak_in_use_bytes']}, late reloads {per_step}")
        # Without the leftovers, the saving aoshim is built for: what the
        # GPU would give if its scan knew them for what they are.
        rc, fig, _ = run(at, *link, shim=True, env=ctx + [("AOSHIM_OFFLOAD_LAYERS", "all")])
        ok_clean(fig, f"{name} under all, leftovers left out")
        print(f"    under all, leftovers left out: in use {fig['peak_in_use_bytes'] / 2**30:.2f} GiB, "
              f"late reloads {fig['late_reloads']}")

        # A budget the link could hide (what 55 GB/s carries in a third of
        # the step without aoshim), served by default: kept in every step
        # (serve.c: a plan of nothing for a given budget goes on serving; it
        # paused once, and the program's pool then held its fragments: 22.77
        # GiB for the H200 GPT's 21.33, and the plans after swung to 13
        # layers at 29.31).
        def under_budget(what, budget, *check):
            """Each step's peak in use of the recorded step under budget, served
            (check: "--check", every sampled byte read back as written)."""
            rc, fig, err = run(tr, *link, *check, shim=True,
                               env=ctx + [("AOSHIM_BUDGET", str(budget))])
            ok_clean(fig, f"{name} with {what}")
            if check:
                expect(fig.get("wrong") == 0, f"{name} with {what}: wrong={fig.get('wrong')}")
            steps = each_step(err)
            print(f"    {what}, {budget / 2**30:.2f} GiB: each step in use (GiB) "
                  f"{' '.join(f'{v / 2**30:.2f}' for v in steps)}, last step "
                  f"{fig['step_ns'] / base['step_ns']:.3f}x without aoshim")
            return steps

        hidden = base["peak_in_use_bytes"] - int(55 * base["step_ns"] / 3)
        steps = under_budget("a budget the link could hide", hidden, "--check")
        # Kept in every step. The Llama's third step, the first under a plan
        # made from a step that split a layer, went 42 MiB over before the
        # split layer was counted whole at the next plan's peak (auto.c:
        # split_correct); the plan that moves more moves the right bytes.
        expect(len(steps) > 3 and max(steps) <= hidden,
               f"{name}: a budget the link could hide ({hidden}) not kept: {steps}")

        # A budget 25% of the activations under the step's peak (issue 22's
        # third check), served: the measuring step keeps it too, its head
        # included (engine.c: ao_measuring_room; the GPT's head took it
        # 847 MiB over with every layer still on the device), and so do the
        # steps from the fourth on; the second and third within 0.5%.
        q25 = base["peak_in_use_bytes"] - acts // 4
        steps = under_budget("a budget 25% of the activations under", q25)
        expect(len(steps) > 3 and steps[0] <= q25 and max(steps[3:]) <= q25 and
               max(steps) <= q25 * 1.005,
               f"{name}: a budget 25% of the activations under ({q25}) not kept: {steps}")
        if "budget" not in runs:
            continue

        # The budget by the driver's count, in every step: the first, which
        # measures, catches up under it (engine.c: measuring_catch_up).
        with open(os.path.join(d, "budget.stderr.txt")) as f:
            gpu_plan = plan_layers(f.read())
        budget = runs["budget"]["budget"]
        rc, fig, err, doc = run_report(tr, *link, env=ctx + [("AOSHIM_BUDGET", str(budget)),
                                                             ("AOSHIM_QUIET", "0")])
        ok_clean(fig, f"{name} with the budget")
        report_true(doc, fig, base, f"{name} with the budget", int(ctx[0][1]))
        # Where the peak is: each of these steps allocates the most in its
        # head (the logits and the loss, after the forward's last layer, by
        # the trace's own sums), and the plan names it so, not as the last
        # layer's forward.
        fwd_most, _, head_most = trace_layer_most(tr)
        where = re.search(r"its peak in the head \(after the last layer's forward, layer (\d+)\)", err)
        expect(head_most > max(fwd_most.values()) and where and
               int(where.group(1)) == max(fwd_most),
               f"{name}: the head's most {head_most}, the forward's {max(fwd_most.values())}; "
               f"the plan's peak: {re.findall(r'its peak in [^,]*', err)[-1:]}")
        steps = each_step(err)
        last = steps[-1] if steps else 0
        print(f"    plan: replay '{plan_layers(err)}' (the GPU's, before the plan counted the "
              f"context: '{gpu_plan}'); last step in use {last / 2**30:.2f} GiB, budget "
              f"{budget / 2**30:.2f} GiB (the GPU's last step: "
              f"{runs['budget']['device_peak_steps'][-1] / 2**30:.2f} GiB)")
        print(f"    each step in use (GiB): {' '.join(f'{v / 2**30:.2f}' for v in steps)} (the H200: "
              f"{' '.join(f'{v / 2**30:.2f}' for v in runs['budget']['device_peak_steps'])})")
        # Deterministic here: no slack (the plan before the context was
        # counted: 17.30 GiB against 17.29 in the last step; the H200 then:
        # 17.93).
        over = [(i, v) for i, v in enumerate(steps) if v > budget]
        expect(len(steps) > 1 and not over, f"{name}: the budget {budget} not kept: {over}")


def group_optimizer():
    """The shared 24-layer GPT at batch 1 (converted from the H200's step):
    its peak is in the optimizer, where no activation is alive, so no policy
    may raise the device's memory in use (the driver's count) by more than
    1% over the replay without aoshim, three steps each. Under auto the
    measuring step gives its layers' memory back before the optimizer
    (engine.c: measuring_yields): it held 32.50 GB against 27.27 before."""
    path = data("gpt24-b1")
    link = ("--link", "55", "--steps", "3")
    rc, base, _ = run(path, *link)
    ok_clean(base, "gpt24-b1 without aoshim")
    # Served: AOSHIM_SERVE=1, and the default (auto), which serves from the
    # start here (the converted step sets the pool's release threshold to
    # the maximum, as PyTorch does) where the plan offloads anything.
    for policy, serve in (("auto", "0"), ("all", "0"), ("auto", "auto"), ("all", "1")):
        rc, fig, err, doc = run_report(path, *link, env=[("AOSHIM_OFFLOAD_LAYERS", policy),
                                                        ("AOSHIM_SERVE", serve),
                                                        ("AOSHIM_QUIET", "0")])
        if serve != "0":
            policy += f", AOSHIM_SERVE={serve}"
        ok_clean(fig, f"gpt24-b1 under {policy}")
        report_true(doc, fig, base, f"gpt24-b1 under {policy}")
        r = fig["peak_in_use_bytes"] / base["peak_in_use_bytes"]
        print(f"    under {policy}: in use {fig['peak_in_use_bytes'] / 2**30:.2f} GiB, without "
              f"{base['peak_in_use_bytes'] / 2**30:.2f} ({r:.4f}x)")
        expect(r <= 1.01, f"gpt24-b1 under {policy}: in use {fig['peak_in_use_bytes']}, without "
                          f"aoshim {base['peak_in_use_bytes']} ({r:.4f}x)")
        # A plan of nothing without a given budget pauses serving: the
        # steps after the first run at the program's pool's speed (served
        # on, 81 ms against 70).
        if serve == "auto":
            expect(fig["step_ns"] <= 1.01 * auto_pool["step_ns"],
                   f"gpt24-b1 under {policy}: step {fig['step_ns']}, beside the pool "
                   f"{auto_pool['step_ns']}")
        if policy == "auto":
            auto_pool = fig
        if policy.startswith("auto"):
            expect(plan_layers(err) == "nothing offloaded",
                   f"gpt24-b1 under auto: plan '{plan_layers(err)}'")
            expect("its peak in the optimizer (after the backward)" in err,
                   f"gpt24-b1 under auto: the plan does not name the optimizer: {err[-600:]}")
    # A budget under the optimizer's peak cannot be kept by moving layers:
    # auto moves none, and says where the peak is and by how much it misses.
    rc, fig, err = run(path, *link, shim=True, env=[("AOSHIM_BUDGET", "20G"), ("AOSHIM_QUIET", "0")])
    ok_clean(fig, "gpt24-b1 with a 20G budget")
    expect(plan_layers(err) == "nothing offloaded" and
           re.search(r"the budget cannot be met, offloading cannot lower a peak there "
                     r"\(it misses by \d+\.\d+ GiB", err),
           f"gpt24-b1 with a 20G budget: {err[-600:]}")
    print(f"    auto, budget 20G: in use {fig['peak_in_use_bytes'] / 2**30:.2f} GiB, "
          f"plan '{plan_layers(err)}'")


def group_sidebyside():
    """train_step --pytorch recorded (data/train-step-pytorch.trace): with
    the program's own allocations in its pool (AOSHIM_SERVE=0), aoshim's
    memory and the pool side by side hold more than one pool would (a
    layer's freed memory kept while the pool grows for the gradients); the
    device model the report leads with counts that as the step's own, the
    program's side says 'may have used more', by about what the replay
    shows. Served from aoshim's memory (AOSHIM_SERVE=1), one pool: no policy
    holds more than the granule and the slabs cost on a step this small
    (5%)."""
    path = data("train-step-pytorch")
    link = ("--link", "55")
    rc, base, _ = run(path, *link)
    ok_clean(base, "train-step-pytorch without aoshim")
    # The default (AOSHIM_SERVE=auto): this trace leaves the pool's release
    # threshold at 0 (it was recorded before train_step set it as PyTorch
    # does), but the step never synchronises, so the pool still holds what
    # the first step freed as the second forward begins: serving begins
    # there, and from then on the steps hold what served ones do (below:
    # within the granule and the slabs, 5%).
    rc, fig, err, doc = run_report(path, *link, env=[("AOSHIM_OFFLOAD_LAYERS", "1")])
    ok_clean(fig, "train-step-pytorch under 1, the default")
    s = doc["summary"]
    each = each_step(err)
    print(f"    under 1, the default: served from step {s['served_from_step']} (its pool held "
          f"{s['serve_pool_unused_bytes'] / 2**20:.0f} MiB unused), in use each step (MiB): "
          f"{' '.join(f'{v / 2**20:.0f}' for v in each)}, without {base['peak_in_use_bytes'] / 2**20:.0f}")
    expect(s["served_from_step"] == 1 and s["serve_pool_unused_bytes"] >= 64 << 20 and
           len(each) > 1 and max(each[1:]) <= 1.05 * base["peak_in_use_bytes"],
           f"train-step-pytorch under 1, the default: served from {s['served_from_step']}, "
           f"in use each step {each}, without {base['peak_in_use_bytes']}")
    for serve in ("0", "1"):
        for policy in ("1", "auto", "all"):
            rc, fig, err, doc = run_report(path, *link, env=[("AOSHIM_OFFLOAD_LAYERS", policy),
                                                            ("AOSHIM_SERVE", serve),
                                                            ("AOSHIM_QUIET", "0")])
            what = f"train-step-pytorch under {policy}, AOSHIM_SERVE={serve}"
            ok_clean(fig, what)
            s = doc["summary"]
            extra = fig["peak_in_use_bytes"] - base["peak_in_use_bytes"]
            print(f"    under {policy}, AOSHIM_SERVE={serve}: in use "
                  f"{fig['peak_in_use_bytes'] / 2**20:.0f} MiB, without "
                  f"{base['peak_in_use_bytes'] / 2**20:.0f}; the report: may have used "
                  f"{s['device_maybe_more_bytes'] / 2**20:.0f} MiB more, the program's side "
                  f"{s['device_without_program_bytes'] / 2**20:.0f} MiB; served "
                  f"{s['served_allocs']} allocations")
            expect(("may have used more" in err) == (s["device_maybe_more_bytes"] > 0),
                   f"{what}: the text and the JSON disagree")
            if serve == "0":
                expect(s["served_allocs"] == 0, f"{what}: served {s['served_allocs']}")
                expect(extra > 0.03 * base["peak_in_use_bytes"], f"{what}: held no more ({extra})")
                expect(abs(s["device_maybe_more_bytes"] - extra) <= 0.25 * extra + (8 << 20),
                       f"{what}: the report says {s['device_maybe_more_bytes']} more, the "
                       f"replay {extra}")
            else:
                # What is left is the granule and the slabs (serve.c) on a
                # step this small (a 30 MiB layer): 24 MiB, 4.8%.
                expect(s["served_allocs"] > 0, f"{what}: nothing served")
                expect(extra <= 0.05 * base["peak_in_use_bytes"],
                       f"{what}: held {extra} more than without aoshim")
                expect(extra > 0 or s["device_maybe_more_bytes"] == 0,
                       f"{what}: held no more, the report says it may have")


GROUPS = {n[6:]: f for n, f in globals().items() if n.startswith("group_")}


def main(argv):
    names = argv or list(GROUPS)
    for n in names:
        if n not in GROUPS:
            print(f"test_replay: unknown group '{n}' (accepted: {', '.join(GROUPS)})")
            return 2
        print(f"== {n}: {GROUPS[n].__doc__.split(chr(10))[0]}")
        GROUPS[n]()
    print(f"test_replay: {len(failures)} failure{'s' if len(failures) != 1 else ''}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
