#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks aoshim's report files (standard library only).

  check_report.py json REPORT.json SCHEMA.md   every documented field, right type
  check_report.py trace TRACE.json REPORT.json one slice per offload and reload
                                               copy, counter max == peak
  check_report.py html PAGE.html               self-contained, SVG timeline, GPU lanes,
                                               legend, table

Prints what it found; exit status 0 when all checks pass, 1 otherwise.
"""
import json
import re
import sys

failures = []
# Copies still unread at exit (see check_trace): none, the engine reads every
# interval before the report (ao_engine_flush).
MAX_UNTIMED = 0


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def schema_rows(md_path):
    rows = []
    for line in open(md_path, encoding="utf-8"):
        m = re.match(r"^\| `([^`]+)` \| ([a-z|\\]+) \|", line)
        if m:
            rows.append((m.group(1), m.group(2).replace("\\", "").split("|")))
    return rows


def type_ok(v, types):
    for t in types:
        if t == "integer" and isinstance(v, int) and not isinstance(v, bool):
            return True
        if t == "number" and isinstance(v, (int, float)) and not isinstance(v, bool):
            return True
        if t == "string" and isinstance(v, str):
            return True
        if t == "null" and v is None:
            return True
        if t == "boolean" and isinstance(v, bool):
            return True
        if t == "array" and isinstance(v, list):
            return True
        if t == "object" and isinstance(v, dict):
            return True
    return False


def values_at(doc, path):
    """Every value at a dotted path; 'x[]' descends into each element."""
    cur = [doc]
    for part in path.split("."):
        arr = part.endswith("[]")
        key = part[:-2] if arr else part
        nxt = []
        for c in cur:
            if key:
                if not isinstance(c, dict) or key not in c:
                    return None
                c = c[key]
            if arr:
                if not isinstance(c, list):
                    return None
                nxt.extend(c)
            else:
                nxt.append(c)
        cur = nxt
    return cur


def check_json(report, schema):
    doc = json.load(open(report, encoding="utf-8"))
    rows = schema_rows(schema)
    if len(rows) < 50:
        fail(f"{schema}: only {len(rows)} schema rows found")
    for path, types in rows:
        vals = values_at(doc, path)
        if vals is None:
            fail(f"{path}: missing")
            continue
        for v in vals:
            if not type_ok(v, types):
                fail(f"{path}: {v!r} is not {'|'.join(types)}")
                break
    s = doc.get("summary", {})
    tl = doc.get("timeline", {}).get("samples", [])
    if tl:
        top = max(x["peak_device_bytes"] for x in tl)
        if top != s.get("peak_device_bytes"):
            fail(f"timeline peak {top} != summary peak {s.get('peak_device_bytes')}")
        topw = max(x["peak_without_offloading_bytes"] for x in tl)
        if topw != s.get("peak_without_offloading_bytes"):
            fail(f"timeline peak without {topw} != summary {s.get('peak_without_offloading_bytes')}")
        nl = len(doc["timeline"]["layers"])
        if any(len(x["layer_bytes"]) != nl for x in tl):
            fail("a timeline sample's layer_bytes does not match timeline.layers")
    print(f"json: {len(rows)} schema rows checked, {len(tl)} timeline samples, "
          f"peak {s.get('peak_device_bytes')}, without {s.get('peak_without_offloading_bytes')}")


def check_trace(trace, report):
    t = json.load(open(trace, encoding="utf-8"))
    doc = json.load(open(report, encoding="utf-8"))
    ev = t.get("traceEvents")
    if not isinstance(ev, list) or not ev:
        fail("no traceEvents")
        return
    off = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "offload"]
    rel = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "reload"]
    for e in off + rel:
        if not all(k in e for k in ("ts", "dur", "pid", "tid", "name")) or e["dur"] < 0:
            fail(f"bad slice {e}")
            break
    s = doc["summary"]
    tr = doc["trace"]
    # One slice per copy whose GPU time was read; a copy still in flight at
    # the program's last aoshim call has none (the report calls no CUDA).
    # Those must be few: at most the last backward's reloads.
    # A layer's early copies (at its end) are a copy out of their own.
    offs = s["layer_offloads"] + tr["offload_copies_early"]
    if tr["offload_copies_issued"] != offs or tr["reload_copies_issued"] != s["layer_reloads"]:
        fail(f"copies issued {tr['offload_copies_issued']}/{tr['reload_copies_issued']} != summary "
             f"{s['layer_offloads']} + {tr['offload_copies_early']} early/{s['layer_reloads']}")
    if len(off) != tr["offload_copies_timed"] or len(rel) != tr["reload_copies_timed"]:
        fail(f"slices {len(off)}/{len(rel)} != timed copies {tr['offload_copies_timed']}/{tr['reload_copies_timed']}")
    untimed = (offs - len(off)) + (s["layer_reloads"] - len(rel))
    if untimed < 0 or untimed > MAX_UNTIMED:
        fail(f"{len(off)} offload and {len(rel)} reload slices for {offs} copies out and "
             f"{s['layer_reloads']} reloads: {untimed} copies without a slice (at most {MAX_UNTIMED})")
    dev = [e["args"]["bytes"] for e in ev if e.get("ph") == "C" and e.get("name") == "device memory"]
    if not dev:
        fail("no 'device memory' counter")
    elif max(dev) != s["peak_device_bytes"]:
        fail(f"device memory counter max {max(dev)} != reported peak {s['peak_device_bytes']}")
    for name in ("offloaded", "pinned host"):
        if not any(e.get("ph") == "C" and e.get("name") == name for e in ev):
            fail(f"no '{name}' counter")
    if not any(e.get("ph") == "C" and str(e.get("name", "")).startswith("resident layer ") for e in ev):
        fail("no per-layer resident counter")
    comp = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "compute"]
    if doc["layers"] and not comp:
        fail("no compute slice (layer forward/backward) though layers were marked")
    waits = [e for e in ev if e.get("ph") == "i" and e.get("cat") == "wait"]
    print(f"trace: {len(ev)} events, {len(off)} offload and {len(rel)} reload slices, "
          f"{len(waits)} waits, device counter max {max(dev) if dev else None}")


def check_html(page):
    h = open(page, encoding="utf-8").read()
    if not h.startswith("<!DOCTYPE html>") or not h.rstrip().endswith("</html>"):
        fail("not a whole HTML document")
    if '<svg id="timeline"' not in h or "</svg>" not in h:
        fail("no <svg> timeline")
    if h.count("<polygon") < 3:
        fail("the timeline has fewer than 3 bands")
    if 'id="without"' not in h or "peak " not in h:
        fail("no counterfactual line or peak mark")
    if '<table id="layers">' not in h or h.count("<tr>") < 2:
        fail("no per-layer table")
    if re.search(r"<script|<link|src=|@import", h, re.I):
        fail("the page loads something (script, link, src, import)")
    urls = set(re.findall(r"https?://[^\"' )]+", h)) - {"http://www.w3.org/2000/svg"}
    if urls:
        fail(f"the page names URLs: {sorted(urls)[:3]}")
    # The GPU lanes under the chart: compute, D2H, H2D, waits on one axis.
    if '<svg id="lanes"' not in h:
        fail("no GPU lanes")
    else:
        lanes = h[h.index('<svg id="lanes"'):]
        lanes = lanes[:lanes.index("</svg>")]
        for cls in ("fwd", "bwd", "d2h", "h2d"):
            if f'<rect class="{cls}"' not in lanes:
                fail(f"the lanes have no '{cls}' bar")
        if lanes.count('class="tick"') < 2:
            fail("the lanes' time axis has fewer than 2 ticks")
        if 'id="hidden"' not in h:
            fail("no line saying how much of the copying hid behind compute")
    if '<div id="legend"' not in h or "layer 0</span>" not in h:
        fail("no legend naming each layer's colour")
    print(f"html: {len(h)} bytes, {h.count('<polygon')} bands, {h.count('<tr>') - 1} table rows, "
          f"{h.count('<rect class=')} lane bars")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    what = sys.argv[1]
    if what == "json":
        check_json(sys.argv[2], sys.argv[3])
    elif what == "trace":
        check_trace(sys.argv[2], sys.argv[3])
    elif what == "html":
        check_html(sys.argv[2])
    else:
        print(__doc__)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
