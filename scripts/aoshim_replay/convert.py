# SPDX-License-Identifier: MIT
"""aoshim-replay convert: a step trace from what PyTorch records.

    aoshim-replay convert --et STEP.et.json[.gz] [--alloc-history STEP.pickle]
                          [--profile TRACE.json[.gz]] -o STEP.trace

Inputs, all of one training step of one program:

- the execution trace (``torch.profiler.ExecutionTraceObserver``, schema 1.x):
  every op in order, on every thread, with the tensors it reads and writes
  (``[tensor id, storage id, offset, numel, element size, device]``);
- optionally the allocator history (``torch.cuda.memory._dump_snapshot``, a
  plain-data pickle): every allocation and free with address, size, stream and
  Python frames, and the segments at the end;
- optionally a profiler trace (Chrome format) of the step: kernel durations.

The output is a step trace, format 1 (docs/trace-format.md). Each op that
launches device work becomes one ``kernel`` + ``launch`` (or a ``memset`` or a
``copy``), with the device ranges it reads and writes. With an allocator
history, the allocations and frees are the history's (the i-th new storage of
the execution trace joined to the i-th allocation, sizes equal up to the
allocator's rounding, the two aligned where one shows what the other does not
or made two in the other order); without one, each storage lives from the op
that creates it to the last op that refers to it, at made-up addresses. Layer
boundaries come from the history's frames (the calls of one function from one
line of a loop) or, without frames, from the op sequence itself (a block of
ops repeated with fresh weights each time), and the backward of each layer
from autograd's sequence numbers.

What it found goes to stderr, one line per finding, prefixed ``aoshim-replay:``.
A malformed input is one ``aoshim-replay: error: ...`` line and exit status 2.
"""
import argparse
import ast
import bisect
import difflib
import gzip
import io
import json
import os
import pickle
import re
import sys

PROG = "aoshim-replay"
FORMAT_VERSION = 1
ET_SCHEMA_MAJOR = "1"
MAX_LINE = 60000  # the format allows 64 KiB; a launch touching more is split

# cudaMallocAsync as PyTorch's backend:cudaMallocAsync sets it up: the default
# pool keeps what it frees (c10/cuda/CUDAMallocAsyncAllocator.cpp sets
# cudaMemPoolAttrReleaseThreshold to UINT64_MAX).
RELEASE_THRESHOLD_MAX = 2**64 - 1


class ConvertError(Exception):
    """A malformed input: main prints it as one line and exits 2."""


def _say(msg):
    sys.stderr.write(f"{PROG}: {msg}\n")


def _gib(n):
    return f"{n / 2**30:.2f} GiB"


# --- reading the inputs ------------------------------------------------------------------
def _read_bytes(path, what):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConvertError(f"{what} {path}: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise ConvertError(f"{what} {path}: not readable gzip ({e})") from None
    return data


def _read_json(path, what):
    data = _read_bytes(path, what)
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ConvertError(f"{what} {path}: not JSON ({e})") from None


class _PlainUnpickler(pickle.Unpickler):
    """A snapshot holds dicts, lists, tuples, strings and numbers only: anything
    that names a class is not one (and is not run)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names a class ({module}.{name})")


def load_history(path):
    data = _read_bytes(path, "--alloc-history")
    try:
        snap = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # a pickle can fail in many ways: all are "not a snapshot"
        raise ConvertError(f"--alloc-history {path}: not an allocator snapshot pickle "
                           f"({type(e).__name__}: {e})") from None
    if (not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list)
            or not isinstance(snap.get("segments"), list)):
        keys = ", ".join(sorted(map(str, snap))[:6]) if isinstance(snap, dict) else type(snap).__name__
        raise ConvertError(f"--alloc-history {path}: not an allocator snapshot (torch.cuda.memory."
                           f"_dump_snapshot: a dict with device_traces and segments; this has {keys})")
    return snap


def load_et(path):
    et = _read_json(path, "--et")
    schema = et.get("schema") if isinstance(et, dict) else None
    if not isinstance(schema, str) or not isinstance(et.get("nodes"), list):
        raise ConvertError(f"--et {path}: not a PyTorch execution trace (a JSON object with "
                           f"'schema' and 'nodes')")
    if schema.split(".")[0] != ET_SCHEMA_MAJOR:
        raise ConvertError(f"--et {path}: execution trace schema '{schema}'; this converter reads "
                           f"schema {ET_SCHEMA_MAJOR}.x")
    for n in et["nodes"][:1]:
        if not all(k in n for k in ("id", "name", "ctrl_deps", "inputs", "outputs")):
            raise ConvertError(f"--et {path}: schema '{schema}' but its nodes lack id, name, "
                               f"ctrl_deps, inputs or outputs")
    return et


def load_profile(path):
    p = _read_json(path, "--profile")
    ev = p.get("traceEvents") if isinstance(p, dict) else p
    if not isinstance(ev, list):
        raise ConvertError(f"--profile {path}: not a Chrome trace (no traceEvents)")
    return p if isinstance(p, dict) else {"traceEvents": ev}


# --- op schemas: which arguments an op writes, which outputs are views -------------------------
_schema_cache = {}


def _split_top(s):
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _parse_schema(schema):
    """[(mutated, keyword_only, name)] per positional value, and whether the
    returns alias an input without writing it (a view)."""
    got = _schema_cache.get(schema)
    if got is not None:
        return got
    args, view = [], False
    i = schema.find("(")
    if i >= 0:
        depth, j = 0, i
        for j in range(i, len(schema)):
            depth += schema[j] == "("
            depth -= schema[j] == ")"
            if depth == 0:
                break
        kw = False
        for a in _split_top(schema[i + 1:j]):
            if a == "*":
                kw = True
                continue
            decl = a.split("=")[0].strip()
            typ, _, name = decl.rpartition(" ")
            args.append(("!" in typ, kw, name))
        ret = schema[j + 1:].partition("->")[2]
        view = bool(re.search(r"Tensor\([a-z](?: -> \*)?\)", ret)) and "!" not in ret
    got = (args, view)
    _schema_cache[schema] = got
    return got


# --- the execution trace as a tree of ops -------------------------------------------------------
class Tensor:
    __slots__ = ("sid", "off", "numel", "esize", "dev", "shape", "stride", "buf", "mode")

    def __init__(self, v, shape, stride):
        self.sid, self.off, self.numel, self.esize, self.dev = v[1], v[2], v[3], v[4], v[5]
        self.shape = shape if isinstance(shape, list) and all(isinstance(x, int) for x in shape) else None
        self.stride = stride if isinstance(stride, list) and all(isinstance(x, int) for x in stride) else None
        self.buf = None
        self.mode = "r"

    def span(self):
        """Bytes from the tensor's first element to the end of its last."""
        if self.numel <= 0 or self.esize <= 0:
            return 0
        if self.shape is not None and self.stride is not None and len(self.shape) == len(self.stride):
            if any(s == 0 for s in self.shape):
                return 0
            n = 1 + sum((s - 1) * abs(st) for s, st in zip(self.shape, self.stride))
        else:
            n = self.numel
        return n * self.esize

    def start(self):
        return self.off * self.esize


def _is_tensor(v):
    return (isinstance(v, list) and len(v) == 6 and isinstance(v[5], str)
            and all(isinstance(x, int) and not isinstance(x, bool) for x in v[:5]))


def _tensors(vals, shapes, strides, flags, out):
    """Tensor arguments of one value list, with each one's flag (from its schema position)."""
    for i, v in enumerate(vals):
        sh = shapes[i] if i < len(shapes) else None
        st = strides[i] if i < len(strides) else None
        fl = flags[i] if i < len(flags) else (False, False, "")
        if _is_tensor(v):
            out.append((Tensor(v, sh, st), fl))
        elif isinstance(v, list) and v and all(_is_tensor(x) for x in v):
            for k, x in enumerate(v):
                out.append((Tensor(x, sh[k] if isinstance(sh, list) and k < len(sh) else None,
                                   st[k] if isinstance(st, list) and k < len(st) else None), fl))


class Op:
    __slots__ = ("id", "name", "kids", "parent", "schema", "attrs", "ins", "outs", "lists",
                 "top", "thread", "made", "work", "wdesc", "dwrites", "writes", "kind",
                 "pos", "scalars")

    def __init__(self, n):
        self.id = n["id"]
        self.name = n["name"]
        self.kids = []
        self.parent = None
        self.attrs = {a.get("name"): a.get("value") for a in n.get("attrs", ()) if isinstance(a, dict)}
        self.schema = self.attrs.get("op_schema") or ""
        self.ins, self.outs, self.lists = [], [], 0
        self.work = self.wdesc = False
        self.kind = None  # "launch", "memset", "copy"
        self.dwrites = set()
        self.writes = set()
        self.top = self.thread = None
        self.made = None  # storages its descendants create (Step._bind)
        self.scalars = []
        inp, outp = n.get("inputs") or {}, n.get("outputs") or {}
        flags = []
        if self.schema:
            flags = _parse_schema(self.schema)[0]
        got = []
        vals = inp.get("values") or []
        _tensors(vals, inp.get("shapes") or [], inp.get("strides") or [], flags, got)
        self.lists = sum(1 for v in vals if isinstance(v, list) and v and all(_is_tensor(x) for x in v))
        self.scalars = [v for v in vals if not isinstance(v, list)]
        for t, (mut, kw, name) in got:
            t.mode = ("w" if kw or name == "out" or self.name in _WRITE_ONLY_SELF else "rw") if mut else "r"
            self.ins.append(t)
        got = []
        _tensors(outp.get("values") or [], outp.get("shapes") or [], outp.get("strides") or [], [], got)
        for t, _ in got:
            t.mode = "w"
            self.outs.append(t)

    @property
    def seq(self):
        v = self.attrs.get("seq_id", -1)
        return v if isinstance(v, int) else -1


# Ops that launch nothing on the device: allocation, metadata, aliasing.
_NO_WORK = {
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided", "aten::resize_", "aten::resize_as_", "aten::detach",
    "aten::detach_", "aten::lift", "aten::lift_fresh", "aten::alias", "aten::set_",
    "aten::record_stream", "aten::_reshape_alias", "aten::is_same_size", "aten::_has_compatible_shallow_copy_type",
    "aten::is_pinned", "aten::_nested_tensor_from_mask_left_aligned", "aten::item",
}
# Factory ops that are an allocation and a fill (their fill child is the work).
_FACTORY = re.compile(r"^aten::(new_)?(zeros|ones|full)(_like)?$")
# In-place ops that overwrite self without reading it.
_WRITE_ONLY_SELF = {
    "aten::fill_", "aten::zero_", "aten::copy_", "aten::random_", "aten::uniform_", "aten::normal_",
    "aten::bernoulli_", "aten::exponential_", "aten::geometric_", "aten::cauchy_", "aten::log_normal_",
}
_FILLS = {"aten::fill_", "aten::zero_"}
# Ops that write no tensor yet read device memory (the value goes to the host).
_READ_ONLY_WORK = {"aten::_local_scalar_dense", "aten::equal"}
# multi_tensor_apply's tensors per launch by the number of tensor lists (depth).
_MTA_MAX_TENSORS = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}

_THREAD_NODE = "[pytorch|profiler|execution_trace|thread]"
_PROCESS_NODE = "[pytorch|profiler|execution_trace|process]"


class Buffer:
    """One life of one storage: from the op that created it (or the step's start)
    to its last reference."""
    __slots__ = ("idx", "sid", "birth", "pre", "extent", "last", "first", "addr", "size", "hist",
                 "dead_after")

    def __init__(self, idx, sid, birth, pre):
        self.idx, self.sid, self.birth, self.pre = idx, sid, birth, pre
        self.extent = 0
        self.last = self.first = -1
        self.addr = self.size = None
        self.hist = None
        self.dead_after = None


class Step:
    """The execution trace, bound: ops in order, storages as buffers, a timeline."""

    def __init__(self, et):
        self.schema = et.get("schema")
        self.meta = {k: et.get(k) for k in ("pid", "time", "torch_version", "pytorch_version")
                     if et.get(k) is not None}
        ops = {}
        for n in et["nodes"]:
            if isinstance(n, dict) and "id" in n:
                ops[n["id"]] = Op(n)
        raw_parent = {n["id"]: n.get("ctrl_deps") for n in et["nodes"] if isinstance(n, dict) and "id" in n}
        for i, op in ops.items():
            p = ops.get(raw_parent[i])
            if p is not None and p is not op:
                op.parent = p
                p.kids.append(op)
        for op in ops.values():
            op.kids.sort(key=lambda o: o.id)
        self.ops = ops
        # Top-level ops: children of the thread nodes (or of no node), by id:
        # ids are handed out as ops start, across threads.
        tops = []
        for op in ops.values():
            if op.name in (_THREAD_NODE, _PROCESS_NODE):
                continue
            if op.parent is None or op.parent.name in (_THREAD_NODE, _PROCESS_NODE):
                tops.append(op)
        tops.sort(key=lambda o: o.id)
        self.tops = tops
        threads = {}
        for i, op in enumerate(tops):
            tid = op.attrs.get("tid", 0)
            op.thread = threads.setdefault(tid, len(threads))
            self._mark(op, i, op.thread)
        devs = {t.dev for op in ops.values() for t in op.ins + op.outs if t.numel > 0 and t.dev}
        accel = sorted(d for d in devs if d != "cpu")
        self.devices = accel or (["cpu"] if "cpu" in devs else [])
        self.on_cpu = not accel
        self._bind()

    def _mark(self, op, top, thread):
        stack = [op]
        while stack:
            o = stack.pop()
            o.top, o.thread = top, thread
            stack.extend(o.kids)

    def is_dev(self, t):
        return t.dev in self.devices and t.numel > 0 and t.esize > 0 and t.sid != 0

    # --- binding tensors to buffers, in execution order -----------------------------------
    def _bind(self):
        self.buffers, self.events = [], []
        cur = {}
        ev = self.events

        def made_below(op):
            """Storages op's descendants create: output without being handed them."""
            if op.made is None:
                made = set()
                for k in op.kids:
                    kins = {t.sid for t in k.ins}
                    made.update(t.sid for t in k.outs
                                if t.sid not in kins and self.is_dev(t) and t.span() > 0)
                    made |= made_below(k)
                op.made = made
            return op.made

        def ref(t):
            b = cur.get(t.sid)
            if b is None:
                b = Buffer(len(self.buffers), t.sid, None, True)
                self.buffers.append(b)
                cur[t.sid] = b
                b.first = len(ev)
            t.buf = b
            b.extent = max(b.extent, t.start() + t.span())

        def visit(op):
            op.pos = len(ev)
            ev.append(("enter", op))
            ins = {t.sid for t in op.ins}
            for t in op.ins:
                if self.is_dev(t):
                    ref(t)
            born = set()
            made = made_below(op) if op.kids else ()
            for t in op.outs:
                # An output the op is not handed is a new storage unless one of its
                # descendants creates it (outputs it without being handed it), even
                # where a child reads it first: mm's resolve_conj, sum's fill_, pow's
                # copy_, the fill_ of each empty in deterministic mode, the resize_ of
                # nll_loss_forward's total_weight, nll_loss_backward's zero_. Storage
                # ids are addresses, used again once the allocator hands an address
                # out again: an id seen before says nothing.
                if (self.is_dev(t) and t.sid not in ins and t.sid not in born and t.span() > 0
                        and t.sid not in made):
                    b = Buffer(len(self.buffers), t.sid, op, False)
                    self.buffers.append(b)
                    cur[t.sid] = b
                    born.add(t.sid)
                    b.first = len(ev)
                    ev.append(("birth", b))
            for k in op.kids:
                visit(k)
            for t in op.outs:
                if self.is_dev(t):
                    ref(t)
            self._classify(op)
            if op.work:
                ev.append(("work", op))
            ev.append(("exit", op))
            here = len(ev) - 1
            for t in op.ins + op.outs:
                if t.buf is not None:
                    t.buf.last = here

        for op in self.tops:
            visit(op)
        # A gradient that autograd accumulates into a parameter lives on in its .grad
        # until the optimizer's zero_grad (set_to_none) or past the step.
        zero = next((op for op in self.tops if op.name.startswith("Optimizer.zero_grad#")), None)
        keep = len(ev) - 1
        if zero is not None:
            keep = next(i for i in range(zero.pos, len(ev)) if ev[i][0] == "exit" and ev[i][1] is zero)
        for op in self.ops.values():
            if op.name.endswith("AccumulateGrad") and not op.name.startswith("autograd::engine"):
                for t in op.ins:
                    if t.buf is not None and not t.buf.pre:
                        t.buf.last = max(t.buf.last, keep)
        # A storage larger than its tensors' extent at birth (a view seen later) is
        # sized by its largest extent over its life.
        for b in self.buffers:
            b.size = b.extent

    def _classify(self, op):
        kids = op.kids
        op.work, op.kind, op.dwrites = False, None, set()
        op.wdesc = any(k.work or k.wdesc for k in kids)
        for k in kids:
            op.dwrites |= k.dwrites
            if k.work and k.name not in _FILLS:
                op.dwrites |= k.writes
        op.writes = {t.buf for t in op.outs if t.buf is not None}
        op.writes |= {t.buf for t in op.ins if t.buf is not None and t.mode != "r"}
        if not op.schema or op.name in _NO_WORK:
            return
        touched = [t for t in op.ins + op.outs if t.buf is not None]
        if not touched:
            return
        args, view = _parse_schema(op.schema)
        mutates = any(m for m, _, _ in args)
        insids = {t.sid for t in op.ins}
        if not mutates and all(t.sid in insids for t in op.outs) and (op.outs or view):
            return  # a view, or an op that returned its input
        if not op.writes and op.name not in _READ_ONLY_WORK:
            return  # metadata (sizes, flags): nothing launched
        if op.wdesc:
            if op.name in _FILLS or _FACTORY.match(op.name) or not (op.writes - op.dwrites):
                return  # composite: its children did the work
        op.work = True
        if op.name in _FILLS and not op.wdesc and self._fill_value(op) == 0:
            t = op.ins[0] if op.ins else None
            if t is not None and t.buf is not None and t.span() == t.numel * t.esize:
                op.kind = "memset"
                return
        if op.name == "aten::copy_" and len(op.ins) >= 2 and op.ins[0].dev != op.ins[1].dev:
            op.kind = "copy"
            return
        if op.name == "aten::_local_scalar_dense" and not self.on_cpu:
            op.kind = "copy"
            return
        op.kind = "launch"

    @staticmethod
    def _fill_value(op):
        if op.name == "aten::zero_":
            return 0
        v = op.scalars[0] if op.scalars else None
        return 0 if v in (0, 0.0, False) and not isinstance(v, str) else v


# --- phases ------------------------------------------------------------------------------------
def _phases(step):
    """Top-level op indices where the backward and the optimizer start (None: absent)."""
    bwd = opt = None
    for i, op in enumerate(step.tops):
        if bwd is None and op.name.startswith("autograd::engine::evaluate_function"):
            bwd = i
        if opt is None and op.name.startswith("Optimizer.step#"):
            opt = i
    if opt is None and bwd is not None:
        last_bwd = max(i for i, op in enumerate(step.tops) if op.name.startswith("autograd::engine::"))
        main = step.tops[0].thread
        opt = next((i for i in range(last_bwd + 1, len(step.tops)) if step.tops[i].thread == main), None)
    return bwd, opt


# --- the allocator history ----------------------------------------------------------------------
def _round512(n):
    return 512 if n <= 512 else (n + 511) // 512 * 512


class History:
    def __init__(self, snap, device=0):
        traces = snap["device_traces"]
        if not traces:
            raise ConvertError("--alloc-history: the snapshot holds no device trace "
                               "(was _record_memory_history enabled before the step?)")
        dev = device if device < len(traces) and traces[device] else next(
            (i for i, t in enumerate(traces) if t), None)
        if dev is None:
            raise ConvertError("--alloc-history: every device trace in the snapshot is empty")
        self.device = dev
        ev = [e for e in traces[dev] if isinstance(e, dict)]
        for e in ev[:1]:
            if not all(k in e for k in ("action", "addr", "size")):
                raise ConvertError("--alloc-history: its trace entries lack action, addr or size")
        self.events = [e for e in ev if e.get("action") in ("alloc", "free_requested")]
        self.allocs = [i for i, e in enumerate(self.events) if e["action"] == "alloc"]
        # Allocations that existed when the step began: live at the end and never
        # allocated within the step, or freed before any allocation at their address.
        pre, seen, freed_pre = [], set(), set()
        for e in self.events:
            a = e["addr"]
            if e["action"] == "alloc":
                seen.add(a)
            elif a not in seen and a not in freed_pre:
                freed_pre.add(a)
                pre.append({"addr": a, "size": e["size"], "stream": e.get("stream", 0), "freed": True})
        for seg in snap["segments"]:
            if not isinstance(seg, dict) or seg.get("device", dev) != dev:
                continue
            for blk in seg.get("blocks", ()):
                if blk.get("state") == "active_allocated" and blk["address"] not in seen \
                        and blk["address"] not in freed_pre:
                    size = blk.get("requested_size") or blk["size"]
                    pre.append({"addr": blk["address"], "size": size,
                                "stream": seg.get("stream", 0), "freed": False})
        pre.sort(key=lambda b: b["addr"])
        self.pre = pre
        self.pre_bytes = sum(b["size"] for b in pre)
        # The history's own peak, counting the pre-existing allocations.
        live = peak = self.pre_bytes
        peak_at = -1
        sizes = {b["addr"]: b["size"] for b in pre}
        for i, e in enumerate(self.events):
            if e["action"] == "alloc":
                live += e["size"]
                sizes[e["addr"]] = e["size"]
                if live > peak:
                    peak, peak_at = live, i
            else:
                live -= sizes.pop(e["addr"], e["size"])
        self.peak, self.peak_at = peak, peak_at


def _describe_storage(step, b):
    op = b.birth
    return f"op #{op.id} {op.name} (top-level op {step.tops[op.top].name}), storage {b.sid} of {b.size} bytes"


def join(step, hist):
    """Pair the execution trace's new device storages with the history's allocations.

    First in order, as both runs created them (the i-th with the i-th); where
    that breaks, by the longest common subsequence of their rounded sizes, which
    leaves out what only one side shows (a reduction's scratch the history
    has, a storage the history's run did not make); then what both left over
    near one place, made in the other order by the other run (_pair_nearby).
    Returns a report dict and sets each joined buffer's ``hist``.
    """
    births = [x for kind, x in step.events if kind == "birth"]
    allocs = [hist.events[i] for i in hist.allocs]
    n = min(len(births), len(allocs))
    prefix = 0
    while prefix < n and _round512(births[prefix].size) == _round512(allocs[prefix]["size"]):
        prefix += 1
    first_fail = None
    if prefix < n:
        b, a = births[prefix], allocs[prefix]
        st = _frames(a)
        at = f" made at {os.path.basename(st[-1][0])}:{st[-1][2]} ({st[-1][1]})" if st else ""
        first_fail = (f"at new storage #{prefix + 1}: {_describe_storage(step, b)} against the "
                      f"history's allocation #{prefix + 1} of {a['size']} bytes{at}")
    elif len(births) != len(allocs):
        first_fail = (f"after {n}: the trace has {len(births)} new storages, the history "
                      f"{len(allocs)} allocations")
    a_sizes = [_round512(b.size) for b in births]
    b_sizes = [_round512(a["size"]) for a in allocs]
    pairs, nearby = _pair_nearby(a_sizes, b_sizes, _align(a_sizes, b_sizes), [a["addr"] for a in allocs])
    for i, j in pairs:
        births[i].hist = hist.allocs[j]
    alone = next((k for k, b in enumerate(births) if b.hist is None), None)
    return {"storages": len(births), "allocs": len(allocs), "prefix": prefix,
            "first_fail": first_fail, "matched": len(pairs), "nearby": nearby,
            "first_alone": (None if alone is None else
                            f"new storage #{alone + 1}: {_describe_storage(step, births[alone])}")}


def _pair_nearby(a, b, pairs, addrs, reach=4):
    """The alignment's pairs, plus pairs of what it left over on both sides: a[i]
    and b[j] of one size within `reach` pairs of each other, which the two runs
    made in the other order (in deterministic mode PyTorch's resize_ allocates the
    new storage, then a 0-dim tensor it hands to set_; the execution trace shows
    the storage at the set_, after the tensor). Pairs of one size are then put back in order (the k-th of one
    size in a region with the k-th), and a pair that would have the trace
    allocate an address again before the history freed it is dropped.
    Returns (pairs sorted by i, how many of them are out of order)."""
    if not pairs:
        return pairs, 0
    firsts = [i for i, _ in pairs]
    paired_i, paired_j = set(firsts), {j for _, j in pairs}
    left = {}  # size -> the allocations of that size nothing paired, in order
    for j, size in enumerate(b):
        if j not in paired_j:
            left.setdefault(size, []).append(j)
    extra = []
    for i, size in enumerate(a):
        js = left.get(size)
        if i in paired_i or not js:
            continue
        k = bisect.bisect_left(firsts, i)  # pairs[k - 1] is the last pair before i
        lo = pairs[k - reach][1] if k >= reach else -1
        hi = pairs[k + reach - 1][1] if k + reach - 1 < len(pairs) else len(b)
        near = pairs[k - 1] if k > 0 else pairs[0]
        want = near[1] + i - near[0]
        x = bisect.bisect_left(js, want)
        cands = [y for y in (x - 1, x) if 0 <= y < len(js) and lo < js[y] < hi]
        if cands:
            y = min(cands, key=lambda y: abs(js[y] - want))
            extra.append((i, js.pop(y)))
    if not extra:
        return pairs, 0
    by_size = {}
    for i, j in pairs + extra:
        ii, jj = by_size.setdefault(a[i], ([], []))
        ii.append(i)
        jj.append(j)
    ordered = sorted(p for ii, jj in by_size.values() for p in zip(sorted(ii), sorted(jj)))
    latest = {}  # address -> the trace's position of the last allocation there, in history order
    keep = set()
    for j, i in sorted((j, i) for i, j in ordered):
        if latest.get(addrs[j], -1) > i:
            continue  # the trace would allocate the address again while it is live
        latest[addrs[j]] = i
        keep.add((i, j))
    ordered = [p for p in ordered if p in keep]
    crossed, top = 0, -1
    for _, j in ordered:
        crossed += j < top
        top = max(top, j)
    return ordered, crossed


_ALIGN_BOTH = 32


def _align(a, b, window=512, confirm=4):
    """Pairs (i, j) with a[i] == b[j], in order: where the two part, the nearest
    resumption (within window) at which the next `confirm` elements agree too.
    Linear in the length: the runs made the same calls, so they part only for
    a while (an allocation one of them does not show)."""
    out, i, j, n, m = [], 0, 0, len(a), len(b)

    def agree(x, y):
        k = 0
        while k < confirm and x + k < n and y + k < m:
            if a[x + k] != b[y + k]:
                return False
            k += 1
        return True

    while i < n and j < m:
        if a[i] == b[j]:
            out.append((i, j))
            i += 1
            j += 1
            continue
        best = None
        for d in range(1, window):
            # skip d of b (allocations the trace does not show), or d of a, or some
            # of both (near ones only: a search over both is quadratic)
            skips = [(0, d), (d, 0)]
            if d <= 2 * _ALIGN_BOTH:
                skips += [(dx, d - dx) for dx in range(1, d) if dx <= _ALIGN_BOTH and d - dx <= _ALIGN_BOTH]
            for dx, dy in skips:
                x, y = i + dx, j + dy
                if x < n and y < m and a[x] == b[y] and agree(x, y):
                    best = (x, y)
                    break
            if best:
                break
        if best is None:
            i += 1
            j += 1
        else:
            x, y = best
            if x > i and y > j:  # what both skipped may still pair up, one here and there
                sm = difflib.SequenceMatcher(None, a[i:x], b[j:y], autojunk=False)
                out += [(i + p + k, j + q + k) for p, q, size in sm.get_matching_blocks()
                        for k in range(size)]
            i, j = x, y
    return out


def join_pre(step, hist):
    """Pair storages the step found in place (weights, optimizer state) with the
    history's allocations from before the step, by size: those never freed first."""
    by_size = {}
    for k, blk in enumerate(hist.pre):
        by_size.setdefault(_round512(blk["size"]), []).append(k)
    for lst in by_size.values():
        lst.sort(key=lambda k: hist.pre[k]["freed"])
    got = 0
    for b in step.buffers:
        if b.pre:
            lst = by_size.get(_round512(b.size))
            if lst:
                b.hist = ("pre", lst.pop(0))
                got += 1
    return got


# --- layers -------------------------------------------------------------------------------------
def _frames(e):
    """A history entry's Python stack, outermost first, without nn.Module's call wrappers."""
    out = []
    for f in reversed(e.get("frames") or ()):
        fn = str(f.get("filename", ""))
        if fn.endswith(os.path.join("torch", "nn", "modules", "module.py")):
            continue
        out.append((fn, str(f.get("name", "")), int(f.get("line", 0) or 0)))
    return out


def _source_class(path, func, lines, search_dirs):
    """The class whose method `func` holds `lines` in the source at path (or a file of
    the same name in search_dirs), or None."""
    cands = [path] + [os.path.join(d, os.path.basename(path)) for d in search_dirs]
    # A library's file as this machine has it (its lines may differ: then no class).
    m = re.search(r"[/\\](?:site|dist)-packages[/\\](.+)$", path)
    if m:
        cands += [os.path.join(d, m.group(1)) for d in sys.path if d]
    for p in cands:
        try:
            with open(p, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for fn in node.body:
                if (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == func
                        and all(fn.lineno <= ln <= (fn.end_lineno or fn.lineno) for ln in lines)):
                    return node.name
        return None
    return None


_WRAPPERS = {"__call__", "_call_impl", "_wrapped_call_impl", "wrapper", "wrapped", "inner",
             "decorate_context", "_fn", "forward_call", "new_forward"}


def layers_from_frames(step, hist, fwd_end, search_dirs):
    """Layers as the invocations of one function from one line, in the forward.

    Candidates are (call path down to a caller line, callee function) pairs; an
    allocation under a candidate whose line in the callee is earlier than the
    previous one's starts a new invocation. The candidate covering the most
    forward allocations with two or more invocations is the block loop.
    Returns (list of (first top, last top) per layer, description) or None.
    """
    fwd = []  # (history index, top-level op, stack)
    for k, b in ((b.hist, b) for b in step.buffers if isinstance(b.hist, int)):
        if b.birth is not None and b.birth.top < fwd_end:
            st = _frames(hist.events[k])
            if st:
                fwd.append((k, b.birth.top, st))
    fwd.sort()
    if not fwd:
        return None
    cands = {}
    for k, top, st in fwd:
        for d in range(1, len(st)):
            key = (tuple(st[:d]), st[d][:2])
            cands.setdefault(key, []).append((st[d][2], top))
    best = None
    for key, lst in cands.items():
        inv, prev = [[]], None
        for line, top in lst:
            if prev is not None and line < prev:
                inv.append([])
            inv[-1].append((line, top))
            prev = line
        if len(inv) < 2:
            continue
        counts = sorted(len(i) for i in inv)
        if counts[-1] > 2 * counts[len(counts) // 2]:
            continue  # invocations of very different sizes: not one block repeated
        score = (len(lst), len(inv))
        if best is None or score > best[0]:
            best = (score, key, inv)
    if best is None:
        return None
    _, (path, callee), inv = best
    firsts = [min(t for _, t in i) for i in inv]
    spans = []
    for n, i in enumerate(inv):
        last = firsts[n + 1] - 1 if n + 1 < len(inv) else max(t for _, t in i)
        spans.append((firsts[n], max(last, firsts[n])))
    # The loop is in the nearest caller that is not a call wrapper (a decorator's
    # wrapper, transformers' GradientCheckpointingLayer.__call__).
    caller = next((f for f in reversed(path) if f[1] not in _WRAPPERS), path[-1])
    cls = _source_class(callee[0], callee[1], sorted({ln for i in inv for ln, _ in i}), search_dirs)
    ccls = _source_class(caller[0], caller[1], [caller[2]], search_dirs)
    what = f"{cls}" if cls else f"{callee[1]} ({os.path.basename(callee[0])})"
    where = f"{ccls}.{caller[1]}" if ccls else f"{caller[1]} ({os.path.basename(caller[0])}:{caller[2]})"
    return spans, f"{len(spans)} x {what} from {where} (frames)"


def layers_from_ops(step, fwd_end):
    """Layers as the longest run of one block of top-level ops repeated, each
    repetition reading weights of its own (storages in place before the step).

    Signatures are the op's name and its tensors' shapes. Of equal coverage the
    shortest block wins; a block starts at the run's first op.
    """
    main = step.tops[0].thread if step.tops else None
    idx = [i for i in range(min(fwd_end, len(step.tops))) if step.tops[i].thread == main]
    sigs, ids = [], {}
    for i in idx:
        op = step.tops[i]
        sig = (op.name, tuple(tuple(t.shape or ()) for t in op.ins))
        sigs.append(ids.setdefault(sig, len(ids)))
    n = len(sigs)

    def weights(a, b):
        return {t.buf.idx for i in idx[a:b] for o in _walk(step.tops[i]) for t in o.ins
                if t.buf is not None and t.buf.pre}

    cands = []
    for p in range(2, n // 2 + 1):
        run = 0
        for i in range(n - p + 1):
            if i < n - p and sigs[i] == sigs[i + p]:
                run += 1
                continue
            if run >= p:
                k = (run + p) // p
                cands.append((k * p, -p, i - run, p, k))
            run = 0
    cands.sort(reverse=True)
    for cover, _, start, p, k in cands[:200]:
        ws = [weights(start + j * p, start + (j + 1) * p) for j in range(k)]
        seen = {}
        for w in ws:
            for b in w:
                seen[b] = seen.get(b, 0) + 1
        # Each repetition must read weights no other one reads (a shared storage,
        # such as a scalar the ops keep reusing, does not count against it).
        if all(any(seen[b] == 1 for b in w) for w in ws):
            spans = [(idx[start + j * p], idx[start + (j + 1) * p - 1]) for j in range(k)]
            return spans, f"{k} x a block of {p} ops, each with weights of its own (execution trace)"
    return None


def _walk(op):
    stack = [op]
    while stack:
        o = stack.pop()
        yield o
        stack.extend(o.kids)


def backward_layers(step, spans, bwd_start):
    """For each backward top-level op, the layer whose forward made its autograd
    node (by sequence number), or None."""
    seq_layer = {}
    for L, (a, b) in enumerate(spans):
        for i in range(a, b + 1):
            for o in _walk(step.tops[i]):
                if o.seq >= 0:
                    seq_layer[o.seq] = L
    out = {}
    if bwd_start is None:
        return out
    for i in range(bwd_start, len(step.tops)):
        op = step.tops[i]
        if not op.name.startswith("autograd::engine::"):
            continue
        for o in _walk(op):
            if o is not op and o.seq >= 0 and o.seq in seq_layer:
                out[i] = seq_layer[o.seq]
                break
    return out


# --- the profiler trace: kernel durations per op --------------------------------------------
def profile_durations(step, prof):
    """Match the step's working ops to the profile's ops that did device work, by
    order and name. Returns ({op id: (dur ns or None, grid, block, [memset bytes])},
    ops matched, our ops, the profile's ops, kernels).

    A zero fill the profile shows as a kernel (PyTorch's fill_ on CUDA is one)
    becomes a launch; the memsets an op issued itself (cuBLAS and reductions
    clear their semaphores) come with it.
    """
    ev = prof["traceEvents"]
    ops = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            x = (e.get("args") or {}).get("External id")
            if x is not None:
                ops[x] = e
    per = {}
    nk = 0
    for e in ev:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memset"):
            continue
        x = (e.get("args") or {}).get("External id")
        op = ops.get(x)
        if op is None:
            continue
        d = per.setdefault(x, [op, 0.0, None, None, [], 0, float(e.get("ts", 0))])
        d[6] = min(d[6], float(e.get("ts", 0)))
        if e["cat"] == "kernel":
            nk += 1
            d[5] += 1
            d[1] += float(e.get("dur", 0))
            if d[2] is None:
                d[2] = e["args"].get("grid")
                d[3] = e["args"].get("block")
        else:
            d[4].append(int(e["args"].get("bytes", 0)))
    # In the order the device ran them (one stream: the order they were issued;
    # an op's own kernel after its children's, as in the step's timeline).
    seq = sorted(per.values(), key=lambda d: d[6])
    mine = [op for op in _work_ops(step) if op.kind in ("launch", "memset")]
    names = {}
    got = {}
    for i, j in _align([names.setdefault(o.name, len(names)) for o in mine],
                       [names.setdefault(d[0].get("name"), len(names)) for d in seq]):
        d, op = seq[j], mine[i]
        if op.kind == "memset" and d[5]:
            op.kind = "launch"
        got[op.id] = (int(round(d[1] * 1000)) if d[5] else None, d[2], d[3], d[4])
    return got, len(mine), len(seq), nk


def _work_ops(step):
    return [e[1] for e in step.events if e[0] == "work"]


# --- writing the trace --------------------------------------------------------------------------
def _enc(s):
    return (str(s).replace("%", "%25").replace(" ", "%20").replace("\n", "%0A").replace("=", "%3D"))


class Writer:
    def __init__(self):
        self.lines = ["aoshim-trace 1"]
        self.t = 0
        self.live = 0
        self.peak = 0
        self.peak_phase = None
        self.phase = None
        self.where = None  # the top-level op being emitted
        self.peak_where = None
        self.sizes = {}

    def rec(self, _kind, **f):
        if _kind not in ("meta", "kernel", "stream", "event"):
            self.t += 1000
            f = {"t": self.t, **f}
        self.lines.append(" ".join([_kind] + [f"{k}={v}" for k, v in f.items() if v is not None]))

    def comment(self, text):
        self.lines.append("# " + text)

    def alloc(self, addr, size, s, tid=None):
        self.rec("alloc", api="cudaMallocAsync", size=size, addr=hex(addr), s=s, tid=tid or None)
        self.sizes[addr] = size
        self.live += size
        if self.live > self.peak:
            self.peak, self.peak_phase, self.peak_where = self.live, self.phase, self.where

    def free(self, addr, s, tid=None):
        self.rec("free", api="cudaFreeAsync", addr=hex(addr), s=s, tid=tid or None)
        self.live -= self.sizes.pop(addr, 0)

    def set_phase(self, name):
        if name != self.phase:
            self.phase = name
            self.rec("phase", name=name)


def convert(et_path, hist_path=None, prof_path=None, out_path=None, say=_say):
    et = load_et(et_path)
    snap = load_history(hist_path) if hist_path else None
    prof = load_profile(prof_path) if prof_path else None
    step = Step(et)
    if not step.tops:
        raise ConvertError(f"--et {et_path}: the execution trace holds no ops")
    bwd, opt = _phases(step)
    fwd_end = bwd if bwd is not None else (opt if opt is not None else len(step.tops))
    report = {"ops": len(step.tops), "devices": step.devices}

    hist = History(snap) if snap is not None else None
    if hist is not None:
        j = join(step, hist)
        j["pre"] = join_pre(step, hist)
        report["join"] = j
        line = (f"join: {j['prefix']} of {j['storages']} new storages match the history's "
                f"allocations in order")
        if j["first_fail"]:
            line += f"; it first fails {j['first_fail']}"
        line += (f"; aligned by size: {j['matched']} matched"
                 + (f" ({j['nearby']} of them made in another order nearby)" if j["nearby"] else "")
                 + f", {j['allocs'] - j['matched']} allocations the trace does not show, "
                 f"{j['storages'] - j['matched']} storages without one"
                 + (f" (the first: {j['first_alone']})" if j["first_alone"] else "") + "; "
                 f"{j['pre']} of {sum(b.pre for b in step.buffers)} storages found in place join the "
                 f"{len(hist.pre)} allocations from before the step ({_gib(hist.pre_bytes)})")
        say(line)

    # Layers.
    search = [os.path.dirname(os.path.abspath(p)) for p in (hist_path, et_path) if p]
    found = layers_from_frames(step, hist, fwd_end, search) if hist is not None else None
    if found is None:
        found = layers_from_ops(step, fwd_end)
    spans = found[0] if found else []
    say("layers: " + (found[1] if found else "none found (no repeated block in the forward)"))
    report["layers"] = len(spans)
    bl = backward_layers(step, spans, bwd)
    report["backward_order"] = []
    for i in sorted(bl):
        if not report["backward_order"] or report["backward_order"][-1] != bl[i]:
            report["backward_order"].append(bl[i])

    durs = {}
    if prof is not None:
        durs, nmine, nprof, nk = profile_durations(step, prof)
        report["profile"] = {"launches": nmine, "matched": len(durs), "profile_ops": nprof}
        nset = sum(len(d[3]) for d in durs.values())
        say(f"profile: {len(durs)} of {nmine} working ops matched one of the profile's {nprof} "
            f"ops with device work ({nk} kernels, {nset} memsets) by order and name")

    w = Writer()
    _emit(step, hist, w, spans, bl, bwd, opt, durs, et_path, hist_path, prof_path, prof, report)
    if hist is not None:
        report["history_peak"] = hist.peak
    report["peak"], report["peak_phase"], report["peak_at"] = w.peak, w.peak_phase, w.peak_where
    say(f"peak: {_gib(w.peak)} live, in the {w.peak_phase or 'step'}"
        + (f" at {w.peak_where}" if w.peak_where else "")
        + (f" (the history's own: {_gib(hist.peak)})" if hist is not None else ""))
    data = ("\n".join(w.lines) + "\n").encode()
    if out_path:
        with open(out_path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", filename="", mtime=0) as g:
            g.write(data)
        dropped = report.get("memsets_dropped")
        say(f"wrote {out_path}: {len(w.lines)} records, {report['launches']} launches"
            + (f"; {dropped} of the profile's memsets had no allocation to go to and were left out"
               if dropped else ""))
    return report, data


def _emit(step, hist, w, spans, bl, bwd, opt, durs, et_path, hist_path, prof_path, prof, report):
    # --- meta
    program = None
    if hist is not None:
        for e in hist.events:
            st = _frames(e)
            if st:
                program = os.path.basename(st[0][0])
                break
    if program is None:
        program = re.sub(r"(\.et)?\.json(\.gz)?$", "", os.path.basename(et_path))
    w.rec("meta", source="convert", program=_enc(program))
    dev = None
    if prof is not None:
        props = prof.get("deviceProperties") or []
        if props and isinstance(props[0], dict):
            dev = props[0]
    w.rec("meta", device=_enc(dev["name"] if dev and dev.get("name") else
                              ("cpu (traced on the CPU; its tensors stand for device tensors)"
                               if step.on_cpu else ",".join(step.devices))))
    if dev and dev.get("totalGlobalMem"):
        w.rec("meta", total=dev["totalGlobalMem"])
    if prof is not None:
        for k, name in (("cuda_driver_version", "driver"), ("cuda_runtime_version", "runtime")):
            if prof.get(k):
                w.rec("meta", **{name: prof[k]})
    tv = step.meta.get("torch_version") or step.meta.get("pytorch_version")
    if tv:
        w.rec("meta", torch=_enc(tv))
    w.rec("meta", steps=1)
    srcs = [os.path.basename(p) for p in (et_path, hist_path, prof_path) if p]
    w.rec("meta", note=_enc("converted from " + " + ".join(srcs)
                            + "; t= is synthetic (1 us per record), not measured"))
    w.comment("PyTorch's backend:cudaMallocAsync sets the default pool's release threshold to "
              "UINT64_MAX: the pool keeps what is freed")
    w.rec("pool", op="attr", pool=0, attr="release_threshold", value=RELEASE_THRESHOLD_MAX)

    # --- streams: the history's, numbered from 2 in order of first use (0: default)
    streams = {0: 0}

    def stream(raw):
        if raw in streams:
            return streams[raw]
        sid = streams[raw] = len([s for s in streams.values() if s >= 2]) + 2
        w.rec("stream", id=sid, flags=0, prio=0)
        return sid

    # --- addresses
    placed = {}  # position in step.events -> [(order, kind, payload)]
    if hist is not None:
        _place_history(step, hist, placed, stream)
        for k, blk in enumerate(hist.pre):
            blk["s"] = stream(blk.get("stream", 0))
        for b in step.buffers:
            if isinstance(b.hist, int):
                e = hist.events[b.hist]
                b.addr, b.size = e["addr"], e["size"]
            elif isinstance(b.hist, tuple):
                blk = hist.pre[b.hist[1]]
                b.addr, b.size = blk["addr"], blk["size"]
    else:
        nxt = 0x7F0000000000
        for b in step.buffers:
            b.addr = nxt
            nxt += (max(b.size, 1) + 511) // 512 * 512

    # --- allocations in place before the step
    w.comment("allocations in place when the step began")
    if hist is not None:
        for blk in hist.pre:
            w.alloc(blk["addr"], blk["size"], blk["s"])
    else:
        for b in step.buffers:
            if b.pre:
                w.alloc(b.addr, b.size, 0)

    # --- the step
    begins = {a: L for L, (a, _) in enumerate(spans)}
    ends = {}
    for L, (_, z) in enumerate(spans):
        ends.setdefault(z, []).append(L)
    bw_first = {}
    for i in sorted(bl):
        bw_first.setdefault(bl[i], i)
    bw_begins = {i: L for L, i in bw_first.items()}
    order = sorted(bw_first, key=lambda L: bw_first[L])
    bw_ends = {}  # top index -> layers whose backward ends before it
    for n, L in enumerate(order):
        if n + 1 < len(order):
            bw_ends.setdefault(bw_first[order[n + 1]], []).append(L)
        else:
            last = max(i for i in bl if bl[i] == L)
            bw_ends.setdefault(("after", last), []).append(L)
    kernels = {}
    launches = 0
    pending_free = {}  # without history: event position -> buffers whose last reference ends there
    if hist is None:
        for b in step.buffers:
            if not b.pre:
                pending_free.setdefault(b.last, []).append(b)

    def ptrs(op):
        got = {}
        for t in op.ins + op.outs:
            b = t.buf
            if b is None or b.addr is None or (b.dead_after is not None and op.pos > b.dead_after):
                continue
            start = t.start()
            n = min(t.span(), max(b.size - start, 0))
            if n <= 0:
                continue
            key = (b.addr + start, n)
            m = got.get(key)
            got[key] = t.mode if m is None or m == t.mode else "rw"
        return [f"{hex(a)}+{n}:{m}" for (a, n), m in got.items()]

    def launch(op):
        nonlocal launches
        tid = op.thread or None
        if op.kind == "memset":
            t = op.ins[0]
            b = t.buf
            if b.addr is not None and (b.dead_after is None or op.pos <= b.dead_after):
                w.rec("memset", s=0, dst=hex(b.addr + t.start()), n=min(t.span(), b.size - t.start()),
                      value=0, tid=tid)
            return
        if op.kind == "copy":
            _emit_copy(step, w, op, tid)
            return
        k = kernels.get(op.name)
        if k is None:
            k = kernels[op.name] = len(kernels) + 1
            w.rec("kernel", id=k, name=_enc(op.name))
        dur, grid, block, sets = durs.get(op.id, (None, None, None, ()))
        for n in sets:
            dst = scratch(op, n)
            if dst is None:
                report["memsets_dropped"] = report.get("memsets_dropped", 0) + 1
            else:
                w.rec("memset", s=0, dst=hex(dst), n=n, value=0, tid=tid)
        grid = ",".join(map(str, grid)) if grid else "1,1,1"
        block = ",".join(map(str, block)) if block else "128,1,1"
        chunks = _chunks(op, ptrs)
        for c in chunks:
            d = None if dur is None else max(dur // len(chunks), 1)
            w.rec("launch", k=k, s=0, grid=grid, block=block, dur=d, ptr=",".join(c) or None, tid=tid)
            launches += 1

    scratch_live = {}  # allocations the execution trace does not show: addr -> (size, top op)
    workspaces = []  # allocations from before the step that no storage joined
    if hist is not None:
        joined = {b.hist[1] for b in step.buffers if isinstance(b.hist, tuple)}
        workspaces = sorted((blk for k, blk in enumerate(hist.pre) if k not in joined),
                            key=lambda blk: -blk["size"])
    cur_top = [None]

    def scratch(op, n):
        """Where a memset the profile shows inside op went: the newest allocation
        made within op's top-level op that the execution trace does not show (a
        reduction's or cuDNN's scratch), else a workspace from before the step, one
        per thread (cuBLAS keeps one per handle, and each thread has its handle)."""
        for a in reversed(scratch_live):
            size, top = scratch_live[a]
            if top == op.top and size >= n:
                return a
        fits = [blk for blk in workspaces if blk["size"] >= n]
        return fits[(op.thread or 0) % len(fits)]["addr"] if fits else None

    def flush(pos):
        for order_, kind, x in placed.pop(pos, ()):
            if kind == "alloc":
                w.alloc(x["addr"], x["size"], x["s"])
                scratch_live[x["addr"]] = (x["size"], cur_top[0])
            elif kind == "free":
                w.free(x["addr"], x["s"])
                scratch_live.pop(x["addr"], None)
        for b in pending_free.pop(pos, ()):
            w.free(b.addr, 0)

    flush(-1)
    for pos, (kind, x) in enumerate(step.events):
        if kind == "enter" and x.parent is None or (kind == "enter" and x.parent.name in
                                                    (_THREAD_NODE, _PROCESS_NODE)):
            i = x.top
            cur_top[0] = i
            w.where = f"{x.name} (top-level op {i})"
            for L in bw_ends.pop(i, ()):
                w.rec("layer", op="backward_end", layer=L)
            if opt is not None and i >= opt:
                w.set_phase("optimizer")
            elif bwd is not None and i >= bwd:
                w.set_phase("backward")
            else:
                w.set_phase("forward")
            # s=0: the stream the block's work runs on, passed as aoshim's
            # PyTorch bootstrap passes it (torch.cuda.current_stream()
            # .cuda_stream, 0 on the default stream) from each thread.
            if i in begins:
                w.rec("layer", op="begin", layer=begins[i], s=0)
            if i in bw_begins:
                w.rec("layer", op="backward_begin", layer=bw_begins[i], s=0)
        elif kind == "birth":
            b = x
            if hist is None:
                w.alloc(b.addr, b.size, 0, b.birth.thread)
            elif isinstance(b.hist, int):
                e = hist.events[b.hist]
                w.alloc(e["addr"], e["size"], stream(e.get("stream", 0)), b.birth.thread)
        elif kind == "work":
            launch(x)
        elif kind == "exit":
            if x.parent is None or x.parent.name in (_THREAD_NODE, _PROCESS_NODE):
                # What the block freed inside itself is freed before its
                # layer ends, as in the program (the MLP's last temporary).
                if ends.get(x.top):
                    flush(pos)
                for L in ends.get(x.top, ()):
                    w.rec("layer", op="end", layer=L)
                for L in bw_ends.pop(("after", x.top), ()):
                    w.rec("layer", op="backward_end", layer=L)
        flush(pos)
    for pos in sorted(placed):
        flush(pos)
    w.rec("layer", op="step_end")
    w.rec("end")
    report["launches"] = launches


def _emit_copy(step, w, op, tid):
    if op.name == "aten::_local_scalar_dense":
        t = op.ins[0]
        if t.buf is not None and t.buf.addr is not None:
            w.rec("copy", s=0, kind="d2h", src=hex(t.buf.addr + t.start()), n=t.esize, **{"async": 0},
                  tid=tid)
        return
    dst, src = op.ins[0], op.ins[1]
    dd, sd = dst.dev != "cpu", src.dev != "cpu"
    kind = {(True, False): "h2d", (False, True): "d2h", (True, True): "d2d"}.get((dd, sd), "h2h")
    non_blocking = next((v for v in op.scalars if isinstance(v, bool)), False)
    f = {"s": 0, "kind": kind}
    if sd and src.buf is not None and src.buf.addr is not None:
        f["src"] = hex(src.buf.addr + src.start())
    if dd and dst.buf is not None and dst.buf.addr is not None:
        f["dst"] = hex(dst.buf.addr + dst.start())
    f["n"] = dst.numel * dst.esize
    f["async"] = int(bool(non_blocking))
    w.rec("copy", **f, tid=tid)


def _chunks(op, ptrs):
    """The launch's pointers, split the way multi_tensor_apply splits a _foreach op
    (a bounded number of tensors per launch), and below the format's line length."""
    all_ptrs = ptrs(op)
    if op.name.startswith("aten::_foreach_") and op.lists:
        depth = op.lists + (1 if op.outs else 0)  # an out-of-place op writes a list of its own
        per = _MTA_MAX_TENSORS.get(min(depth, 5), 30)
        ntens = max(len(op.ins) // max(op.lists, 1), 1)
        if ntens > per:
            out = []
            for c in range(0, ntens, per):
                sub = _Sub(op, c, per, ntens)
                out.append(ptrs(sub))
            return out
    out, cur, size = [], [], 0
    for p in all_ptrs:
        if cur and size + len(p) + 1 > MAX_LINE - 200:
            out.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += len(p) + 1
    out.append(cur)
    return out


class _Sub:
    """The c-th group of a _foreach op's tensors: the same slice of each tensor list,
    plus its single tensors."""

    def __init__(self, op, c, per, ntens):
        self.pos = op.pos
        lists = op.lists
        ins = op.ins
        listed = ins[:lists * ntens] if len(ins) >= lists * ntens else ins
        self.ins = [t for j in range(lists) for t in listed[j * ntens + c:j * ntens + c + per]]
        self.ins += ins[lists * ntens:]
        self.outs = op.outs[c:c + per] if op.outs else []


def _place_history(step, hist, placed, stream):
    """Put each history event the execution trace does not show in the timeline:
    after the last joined allocation before it, a free no earlier than the last
    reference to what it frees, and never after the next allocation at its address."""
    birth_pos = {}
    for pos, (kind, x) in enumerate(step.events):
        if kind == "birth" and isinstance(x.hist, int):
            birth_pos[x.hist] = pos
    # next_work[p]: the first launch at or after p (a scratch allocation is made
    # for the kernel that follows it)
    next_work = [len(step.events)] * (len(step.events) + 1)
    for pos in range(len(step.events) - 1, -1, -1):
        next_work[pos] = pos if step.events[pos][0] == "work" else next_work[pos + 1]
    buf_of = {b.hist: b for b in step.buffers if isinstance(b.hist, int)}
    pre_buf = {hist.pre[b.hist[1]]["addr"]: b for b in step.buffers if isinstance(b.hist, tuple)}
    live = {}  # addr -> (history index of its alloc or None for pre-existing, buffer)
    for blk in hist.pre:
        live[blk["addr"]] = (None, pre_buf.get(blk["addr"]))
    last_free = {}  # addr -> (position, history index, the placed entry, the buffer it frees)
    where = {}  # history index of an allocation the trace does not show -> its position
    prev = -1
    for k, e in enumerate(hist.events):
        a = e["addr"]
        s = stream(e.get("stream", 0))
        if e["action"] == "alloc":
            q = birth_pos.get(k)
            lf = last_free.get(a)
            if q is not None:
                if lf is not None and lf[0] >= q:
                    # The free comes too late for this allocation at its address: hold it
                    # just before, and drop later pointers into what it freed.
                    _move(placed, lf, q - 1)
                    if lf[3] is not None:
                        lf[3].dead_after = q - 1
                prev = q
                live[a] = (k, buf_of.get(k))
            else:
                p = max(prev, lf[0] if lf is not None else -1)
                _put(placed, p, k, "alloc", {"addr": a, "size": e["size"], "s": s})
                where[k] = p
                live[a] = (k, None)
        else:
            got = live.pop(a, None)
            b = got[1] if got else None
            p = prev
            if b is not None:
                p = max(p, b.last)
            if got is not None and got[0] is not None and got[0] not in birth_pos:
                p = max(p, min(next_work[where[got[0]] + 1], len(step.events) - 1))
            entry = _put(placed, p, k, "free", {"addr": a, "s": s})
            last_free[a] = (p, k, entry, b)


def _put(placed, pos, order, kind, payload):
    entry = (order, kind, payload)
    lst = placed.setdefault(pos, [])
    bisect.insort(lst, entry, key=lambda x: x[0])
    return entry


def _move(placed, lf, pos):
    old, order, entry, _ = lf
    placed[old].remove(entry)
    bisect.insort(placed.setdefault(pos, []), entry, key=lambda x: x[0])


# --- command line ------------------------------------------------------------------------------
def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["convert"]:
        argv = argv[1:]
    ap = argparse.ArgumentParser(
        prog=f"{PROG} convert",
        description="Make a step trace (docs/trace-format.md) from PyTorch's execution trace, "
                    "allocator history and profiler trace of one training step.")
    ap.add_argument("--et", required=True, metavar="STEP.et.json[.gz]",
                    help="execution trace (torch.profiler.ExecutionTraceObserver)")
    ap.add_argument("--alloc-history", metavar="STEP.pickle",
                    help="allocator history (torch.cuda.memory._dump_snapshot) of the same step")
    ap.add_argument("--profile", metavar="TRACE.json[.gz]",
                    help="profiler trace (Chrome format) of the same step: kernel durations")
    ap.add_argument("-o", "--output", required=True, metavar="STEP.trace", help="the trace to write (gzip)")
    a = ap.parse_args(argv)
    try:
        convert(a.et, a.alloc_history, a.profile, a.output)
    except ConvertError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: {a.output}: {e.strerror or e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
