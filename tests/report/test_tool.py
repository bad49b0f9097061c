#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/aoshim-report against real reports: it prints exactly the table
aoshim printed at exit, compares two runs side by side, merges ranks into
one table, and writes a PyTorch memory snapshot that PyTorch's viewer reads
(checked against the format torch.cuda.memory._snapshot() documents and
MemoryViz.js reads; with torch's own torch.cuda._memory_viz helpers too when
a Python with torch is at hand: the source tree's .venv, or AO_TORCH_PYTHON)."""
import json
import os
import pickle
import pickletools
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
        # Two ranks of a job, as two runs: rank 1 offloads fewer layers.
        ra = runner.run({"AOSHIM_REPORT": a, "AOSHIM_OFFLOAD_LAYERS": "all", "RANK": "0"})
        rb = runner.run({"AOSHIM_REPORT": b, "AOSHIM_OFFLOAD_LAYERS": "2", "RANK": "1"})
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
        # The rows only some runs have: one layer of a PyTorch-like step,
        # served by default ('served from aoshim's memory') and beside the
        # program's pool ('may have used more').
        pyt = "--pytorch --layers 6 --hidden 512 --seq 512 --batch 2 --heads 8 --steps 3"
        for env, row in ((("AOSHIM_SERVE", "auto"), "served from aoshim's memory"),
                         (("AOSHIM_SERVE", "0"), "may have used more")):
            c = os.path.join(d, "c.json")
            rc = runner.run({"AOSHIM_REPORT": c, "AOSHIM_OFFLOAD_LAYERS": "1", env[0]: env[1]},
                            args=pyt)
            exit_rows = rc.stderr[rc.stderr.index("aoshim: memory summary"):].splitlines()[1:]
            tool = subprocess.run([sys.executable, TOOL, c], capture_output=True, text=True)
            rows = [l for l in tool.stdout.splitlines() if l.startswith("aoshim:")]
            if rc.returncode != 0 or rows != exit_rows or not any(row in l for l in rows):
                bad += 1
                print(f"FAIL: {env[0]}={env[1]}: the tool's table differs from the exit summary "
                      f"or has no '{row}' row")
                for x, y in zip(rows, exit_rows):
                    if x != y:
                        print(f"  tool: {x}\n  exit: {y}")
        cmp_ = subprocess.run([sys.executable, TOOL, a, b], capture_output=True, text=True)
        text = cmp_.stdout
        print(text)
        for want in ("device memory in use", "peak allocated", "saved", "compute stream waited on reloads", "layer"):
            if want not in text:
                bad += 1
                print(f"FAIL: comparison has no '{want}'")
        if cmp_.returncode != 0:
            bad += 1
            print(f"FAIL: comparison exit {cmp_.returncode}: {cmp_.stderr}")
        bad += invalid_utf8(d)
        bad += merged(a, b)
        bad += snapshot(a, d)
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


def merged(a, b):
    """aoshim-report merge: one row per rank, in rank order whatever the
    order named, and the worst across them naming the right rank."""
    bad = 0
    docs = [json.load(open(p, encoding="utf-8")) for p in (a, b)]
    out = subprocess.run([sys.executable, TOOL, "merge", b, a], capture_output=True, text=True)
    print(out.stdout)
    if out.returncode != 0:
        print(f"FAIL: merge exit {out.returncode}: {out.stderr}")
        return 1
    lines = out.stdout.splitlines()
    ranks = [l.split()[0] for l in lines[1:3]]
    if ranks != ["0", "1"]:
        bad += 1
        print(f"FAIL: merge rows are ranks {ranks}, want 0 then 1")
    top = max(docs, key=lambda x: x["summary"]["peak_device_bytes"])
    low = min(docs, key=lambda x: x["summary"]["saved_bytes"])
    want = {"max peak": f"(rank {top['rank']})", "min saving": f"(rank {low['rank']})",
            "late reloads": str(sum(x["summary"]["late_reloads"] for x in docs))}
    for label, text in want.items():
        line = next((l for l in lines if l.startswith(label)), "")
        if text not in line:
            bad += 1
            print(f"FAIL: merge's '{label}' line is {line!r}, want it to name {text!r}")
    if docs[0]["summary"]["peak_device_bytes"] == docs[1]["summary"]["peak_device_bytes"]:
        bad += 1
        print("FAIL: the two ranks have the same peak: the 'max peak' check proves nothing")
    return bad


# What PyTorch's memory viewer reads. Actions: torch.cuda.memory._snapshot()'s
# docstring, plus segment_map/segment_unmap (expandable segments), which
# MemoryViz.js replays. Opcodes: those MemoryViz.js's own unpickler decodes
# (it throws on any other, and on a protocol above 4).
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom", "annotate"}
VIEWER_OPCODES = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
                  "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MARK", "SETITEMS", "SETITEM",
                  "APPENDS", "APPEND", "LIST", "TUPLE", "DICT", "TUPLE1", "TUPLE2", "TUPLE3",
                  "BININT", "BININT1", "BININT2", "LONG1", "SHORT_BINUNICODE", "BINUNICODE",
                  "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE", "STOP"}
BLOCK_STATES = {"active_allocated", "active_awaiting_free", "inactive"}


def check_snapshot(snap, raw, doc):
    """The failures (strings) of a snapshot against the format and the run."""
    errs = []
    proto = next(arg for op, arg, _ in pickletools.genops(raw) if op.name == "PROTO")
    ops = {op.name for op, _, _ in pickletools.genops(raw)}
    if not 2 <= proto <= 4:
        errs.append(f"pickle protocol {proto}: the viewer reads 2 to 4")
    if ops - VIEWER_OPCODES:
        errs.append(f"pickle opcodes the viewer cannot read: {sorted(ops - VIEWER_OPCODES)}")
    if not isinstance(snap, dict) or not {"segments", "device_traces"} <= set(snap):
        return errs + [f"top-level keys {sorted(snap) if isinstance(snap, dict) else type(snap)}"]
    traces = snap["device_traces"]
    if not isinstance(traces, list) or len(traces) != 1 or not traces[0]:
        return errs + ["device_traces is not one non-empty list (one device)"]
    for seg in snap["segments"]:
        for k, t in (("address", int), ("total_size", int), ("stream", int), ("device", int),
                     ("segment_type", str), ("allocated_size", int), ("active_size", int),
                     ("blocks", list)):
            if not isinstance(seg.get(k), t):
                errs.append(f"segment without {k} ({t.__name__})")
        if sum(b["size"] for b in seg["blocks"]) != seg["total_size"]:
            errs.append(f"segment {seg['address']:#x}: blocks do not tile it")
        for b in seg["blocks"]:
            if b.get("state") not in BLOCK_STATES or not isinstance(b.get("requested_size"), int) \
                    or not isinstance(b.get("frames"), list):
                errs.append(f"bad block {b}")
                break
    # Replay the actions as the viewer does: a block lies inside mapped
    # memory, a free names a live block, the end state is the segments.
    live, mapped, total, high, cats = {}, [], 0, 0, set()
    for e in traces[0]:
        a = e.get("action")
        if a not in ACTIONS:
            errs.append(f"unknown action {a!r}")
            break
        if not all(isinstance(e.get(k), int) for k in ("addr", "size", "stream", "time_us")) or \
                not all({"filename", "line", "name"} <= set(f) for f in e.get("frames", [None])):
            errs.append(f"entry without addr/size/stream/time_us/frames: {e}")
            break
        if "category" in e:
            cats.add(e["category"])
        addr, size = e["addr"], e["size"]
        # Mapped ranges merge with their neighbours and an unmap may take
        # any part of one (MemoryViz.js's map_segment/unmap_segment).
        if a == "segment_map":
            if any(lo < addr + size and addr < hi for lo, hi in mapped):
                errs.append(f"map of {addr:#x}+{size} over mapped memory")
                break
            lo, hi = addr, addr + size
            for r in [r for r in mapped if r[1] == lo or r[0] == hi]:
                mapped.remove(r)
                lo, hi = min(lo, r[0]), max(hi, r[1])
            mapped.append((lo, hi))
        elif a == "segment_unmap":
            lo, hi = next(((lo, hi) for lo, hi in mapped if lo <= addr and addr + size <= hi),
                          (None, None))
            if lo is None or any(addr <= b < addr + size for b in live):
                errs.append(f"unmap of {addr:#x}+{size}: not mapped, or a live block in it")
                break
            mapped.remove((lo, hi))
            mapped += [r for r in ((lo, addr), (addr + size, hi)) if r[1] > r[0]]
        elif a == "alloc":
            if not any(lo <= addr and addr + size <= hi for lo, hi in mapped) or addr in live:
                errs.append(f"alloc {addr:#x}+{size} outside mapped memory or over a live block")
                break
            live[addr] = size
            total += size
            high = max(high, total)
        elif a == "free_completed":
            if live.get(addr) != size:
                errs.append(f"free of {addr:#x}+{size}, not a live block")
                break
            del live[addr]
            total -= size
    end = {b["address"]: b["size"] for s in snap["segments"] for b in s["blocks"]}
    if not errs and end != live:
        errs.append("the segments are not the state the actions end in")
    want = max(x["device_bytes"] for x in doc["timeline"]["samples"])
    if high != want:
        errs.append(f"highest allocated total {high} != the timeline's highest device memory {want}")
    # Each kind of memory a category; "unknown" among them, or MemoryViz.js
    # throws (it appends it to a misspelt name when missing).
    need = {"unknown", "resident"} | ({"offloaded", "reloaded"} if doc["summary"]["layer_reloads"] else set())
    if not need <= cats:
        errs.append(f"categories {sorted(cats)}, want {sorted(need)}")
    return errs


TORCH_CHECK = r"""
import pickle, sys
from torch.cuda import _memory_viz as mv
snap = pickle.load(open(sys.argv[1], "rb"))
mv.segsum(snap); mv.trace(snap)
flat = mv.memory(snap, format_flamegraph=lambda lines: lines)
# The segments are the memory held at the end of the run: none when the
# program freed everything before exit.
assert not snap["segments"] or "active_allocated" in flat, flat[:200]
mv.segments(snap, format_flamegraph=lambda lines: lines)
html = mv.trace_plot(snap)
assert "snapshot.pickle" in html
print("torch's _memory_viz read it: segsum, trace, memory, segments, trace_plot")
"""


def snapshot(report, d):
    """aoshim-report --torch-snapshot: the snapshot, its structure, and a
    broken one failing the same check (so the check can fail)."""
    bad = 0
    out_path = os.path.join(d, "run.pickle")
    r = subprocess.run([sys.executable, TOOL, "--torch-snapshot", report, "-o", out_path],
                       capture_output=True, text=True)
    print(r.stdout.strip())
    if r.returncode != 0 or not os.path.exists(out_path):
        print(f"FAIL: --torch-snapshot exit {r.returncode}: {r.stderr}")
        return 1
    raw = open(out_path, "rb").read()
    snap = pickle.loads(raw)
    doc = json.load(open(report, encoding="utf-8"))
    for e in check_snapshot(snap, raw, doc):
        bad += 1
        print(f"FAIL: snapshot: {e}")
    # The check itself: a free of a block never allocated, a protocol-5
    # pickle, a missing "unknown" category must each fail.
    broken = pickle.loads(raw)
    broken["device_traces"][0].insert(0, dict(broken["device_traces"][0][1], action="free_completed"))
    for name, s, data in (("a stray free", broken, pickle.dumps(broken, protocol=4)),
                          ("protocol 5", snap, pickle.dumps(snap, protocol=5)),
                          ("no 'unknown' category",
                           {**snap, "device_traces": [[dict(e, category="resident")
                                                       for e in snap["device_traces"][0]]]}, raw)):
        if not check_snapshot(s, data, doc):
            bad += 1
            print(f"FAIL: the snapshot check passes {name}")
    py = os.environ.get("AO_TORCH_PYTHON") or os.path.join(
        os.path.dirname(TOOL), "..", ".venv", "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import torch"],
                                             capture_output=True).returncode == 0:
        t = subprocess.run([py, "-c", TORCH_CHECK, out_path], capture_output=True, text=True,
                           timeout=300)
        print(t.stdout.strip())
        if t.returncode != 0:
            bad += 1
            print(f"FAIL: torch.cuda._memory_viz cannot read the snapshot:\n{t.stderr[-2000:]}")
    else:
        print("note: no Python with torch (.venv or AO_TORCH_PYTHON): torch's own viewer helpers not run")
    return bad


if __name__ == "__main__":
    sys.exit(main())
