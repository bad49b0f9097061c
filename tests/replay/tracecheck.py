# SPDX-License-Identifier: MIT
"""A step trace's own account, read back independently of the converter: live
bytes at each record, the peak and its phase, and every launch, memset and copy
checked to touch only memory that is allocated at that point."""
import bisect
import gzip


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    lines = data.decode().splitlines()
    assert lines[0] == "aoshim-trace 1", lines[0]
    out = []
    for ln in lines[1:]:
        if not ln or ln.startswith("#"):
            continue
        kind, *fields = ln.split(" ")
        out.append((kind, dict(f.split("=", 1) for f in fields)))
    return out


class Account:
    def __init__(self, records):
        self.live = {}  # addr -> size
        self.starts = []  # sorted live addresses
        self.bytes = self.peak = 0
        self.peak_phase = None
        self.phase = None
        self.bad = []  # (record index, what)
        self.counts = {}
        self.layers = []  # (op, layer)
        for i, (kind, f) in enumerate(records):
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind == "phase":
                self.phase = f["name"]
            elif kind == "alloc":
                a, n = int(f["addr"], 16), int(f["size"])
                if self._owner(a, 1) is not None:
                    self.bad.append((i, f"alloc at {f['addr']} inside a live allocation"))
                self.live[a] = n
                bisect.insort(self.starts, a)
                self.bytes += n
                if self.bytes > self.peak:
                    self.peak, self.peak_phase = self.bytes, self.phase
            elif kind == "free":
                a = int(f["addr"], 16)
                if a not in self.live:
                    self.bad.append((i, f"free of {f['addr']}, not live"))
                    continue
                self.bytes -= self.live.pop(a)
                self.starts.pop(bisect.bisect_left(self.starts, a))
            elif kind == "launch":
                for p in filter(None, f.get("ptr", "").split(",")):
                    rng, _, _mode = p.partition(":")
                    a, _, n = rng.partition("+")
                    self._touch(i, int(a, 16), int(n or 1))
            elif kind == "memset":
                self._touch(i, int(f["dst"], 16), int(f["n"]))
            elif kind == "copy":
                for k in ("src", "dst"):
                    if k in f:
                        self._touch(i, int(f[k], 16), int(f["n"]))
            elif kind == "layer":
                self.layers.append((f["op"], int(f["layer"]) if "layer" in f else None))

    def _owner(self, a, n):
        k = bisect.bisect_right(self.starts, a) - 1
        if k >= 0:
            s = self.starts[k]
            if a + n <= s + self.live[s]:
                return s
        return None

    def _touch(self, i, a, n):
        if self._owner(a, n) is None:
            self.bad.append((i, f"touches {hex(a)}+{n} outside any live allocation"))
