# SPDX-License-Identifier: MIT
"""aoshim-replay convert on real steps: the GPT recorded on an H200 (with its
allocator history) and a Hugging Face Llama traced on the CPU (execution trace
only). No torch is imported here."""
import gzip
import io
import json
import os
import pathlib
import pickle
import re
import subprocess
import sys

import pytest

# Standard library only: aoshim_replay from scripts/, tracecheck from here
# (no conftest.py: tests/python has its own, and one pytest run imports
# both under the one name).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import tracecheck  # noqa: E402
from aoshim_replay import convert as C  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data"
ROOT = HERE.parents[1]
GPT_ET = DATA / "gpt24-b1.et.json.gz"
GPT_HIST = DATA / "gpt24-b1.alloc-history.pickle.gz"
GPT_PROF = DATA / "gpt24-b1-all.torch-profile.json.gz"
LLAMA_ET = DATA / "llama4-cpu.et.json.gz"
G16 = DATA / "h200-gpt16"
BUILD = pathlib.Path(os.environ.get("AO_REPLAY_BUILD", ROOT / "build"))
GIB = 2**30


def convert(tmp_path, *args):
    """Run the converter as the command line does; (status, stderr lines, trace records)."""
    out = tmp_path / "out.trace"
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        rc = C.main(["convert", *map(str, args), "-o", str(out)])
    finally:
        sys.stderr = old
    lines = err.getvalue().splitlines()
    return rc, lines, (tracecheck.read(out) if rc == 0 else None), out


def line(lines, key):
    got = [ln for ln in lines if ln.startswith(f"aoshim-replay: {key}: ")]
    assert len(got) == 1, lines
    return got[0]


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return convert(tmp_path_factory.mktemp("gpt"), "--et", GPT_ET, "--alloc-history", GPT_HIST,
                   "--profile", GPT_PROF)


@pytest.fixture(scope="module")
def gpt_et_only(tmp_path_factory):
    return convert(tmp_path_factory.mktemp("gpt-et"), "--et", GPT_ET)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return convert(tmp_path_factory.mktemp("llama"), "--et", LLAMA_ET)


def history_peak(path=GPT_HIST):
    """The allocator history's own peak, counted here from the pickle: what was in
    place at the start (live at the end and never allocated in the step, or freed
    before any allocation at its address) plus the step's allocations and frees."""
    snap = pickle.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_requested")]
    allocated = {e["addr"] for e in ev if e["action"] == "alloc"}
    live, seen = {}, set()
    for e in ev:
        if e["action"] == "alloc":
            seen.add(e["addr"])
        elif e["addr"] not in seen:
            live[e["addr"]] = e["size"]
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and b["address"] not in allocated:
                live[b["address"]] = b["requested_size"]
    start = total = peak = sum(live.values())
    for e in ev:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            total += e["size"]
            peak = max(peak, total)
        else:
            total -= live.pop(e["addr"])
    return start, peak


# --- the GPT, with its allocator history ---------------------------------------------------------
def test_gpt_join(gpt):
    rc, lines, _, _ = gpt
    assert rc == 0
    j = line(lines, "join")
    # The two runs create their storages in the same order until the first cuDNN
    # attention workspace, which the execution trace does not show.
    assert j.startswith("aoshim-replay: join: 16 of 1809 new storages match the history's "
                        "allocations in order; it first fails at new storage #17: op #165 "
                        "aten::empty_strided (top-level op aten::linear)"), j
    assert "made at capture.py:16 (forward)" in j
    assert "1809 matched, 240 allocations the trace does not show, 0 storages without one" in j
    assert "876 of 876 storages found in place join the 879 allocations from before the step (14.77 GiB)" in j


def test_gpt_before_the_step_is_14_77_gib(gpt):
    _, _, recs, _ = gpt
    first_phase = next(i for i, (k, _) in enumerate(recs) if k == "phase")
    before = sum(int(f["size"]) for k, f in recs[:first_phase] if k == "alloc")
    assert before == history_peak()[0]
    assert abs(before / GIB - 14.77) < 0.01


def test_gpt_layers_and_backward_order(gpt):
    rc, lines, recs, _ = gpt
    assert line(lines, "layers") == "aoshim-replay: layers: 24 x Block from GPT.forward (frames)"
    acc = tracecheck.Account(recs)
    begins = [L for op, L in acc.layers if op == "begin"]
    ends = [L for op, L in acc.layers if op == "end"]
    bwd = [L for op, L in acc.layers if op == "backward_begin"]
    assert begins == list(range(24)) and ends == list(range(24))
    assert bwd == list(range(23, -1, -1))
    # Each layer's forward is closed before the next opens; the backward comes after.
    ops = [op for op, _ in acc.layers]
    assert ops[:48] == ["begin", "end"] * 24
    assert ops[48:96] == ["backward_begin", "backward_end"] * 24
    assert ops[-1] == "step_end"


def test_gpt_peak_is_the_historys_in_the_optimizer(gpt):
    _, lines, recs, _ = gpt
    acc = tracecheck.Account(recs)
    _, hist = history_peak()
    assert abs(hist / GIB - 24.57) < 0.01
    assert abs(acc.peak - hist) <= 0.05 * hist, (acc.peak / GIB, hist / GIB)
    assert acc.peak_phase == "optimizer"
    assert "in the optimizer at Optimizer.step#AdamW.step" in line(lines, "peak")


def test_gpt_trace_touches_only_live_memory(gpt):
    _, _, recs, _ = gpt
    acc = tracecheck.Account(recs)
    assert acc.bad == []
    assert acc.counts["alloc"] == 879 + 2049 and acc.counts["free"] == 2049
    assert acc.counts["copy"] == 1  # the batch, host to device
    # The profile's memsets (cuBLAS's and the reductions' semaphores, cuDNN's), each
    # into scratch the step allocated or a workspace from before it. The zero
    # fills were kernels on the H200 (fill_), so they are launches here.
    assert acc.counts["memset"] == 290
    # AdamW's _foreach ops are split as multi_tensor_apply splits them (292 tensors).
    kernels = {f["id"]: f["name"] for k, f in recs if k == "kernel"}
    sqrt = [f for k, f in recs if k == "launch" and kernels[f["k"]] == "aten::_foreach_sqrt"]
    assert len(sqrt) == 5 and sum(len(f["ptr"].split(",")) for f in sqrt) == 2 * 292


def test_gpt_profile_durations(gpt):
    _, lines, recs, _ = gpt
    assert line(lines, "profile") == (
        "aoshim-replay: profile: 1259 of 1259 working ops matched one of the profile's 1259 ops "
        "with device work (1860 kernels, 290 memsets) by order and name")
    launches = [f for k, f in recs if k == "launch"]
    assert all("dur" in f for f in launches)
    kernels = {f["id"]: f["name"] for k, f in recs if k == "kernel"}
    mm = [int(f["dur"]) for f in launches if kernels[f["k"]] == "aten::addmm"]
    assert 10_000 < sorted(mm)[len(mm) // 2] < 1_000_000  # ns: tens of microseconds


def test_gpt_format(gpt):
    _, _, recs, out = gpt
    text = gzip.decompress(out.read_bytes()).decode()
    lines = text.splitlines()
    assert lines[0] == "aoshim-trace 1"
    assert max(map(len, lines)) < 64 * 1024
    kinds = [k for k, _ in recs]
    first_event = next(i for i, k in enumerate(kinds) if k != "meta")
    assert all(k == "meta" for k in kinds[:first_event])
    assert recs[first_event] == ("pool", {"t": recs[first_event][1]["t"], "op": "attr", "pool": "0",
                                          "attr": "release_threshold",
                                          "value": "18446744073709551615"})
    meta = {k: v for kind, f in recs[:first_event] for k, v in f.items()}
    assert meta["source"] == "convert" and meta["steps"] == "1" and meta["program"] == "capture.py"
    assert meta["device"] == "NVIDIA%20H200" and meta["total"] == "150109880320"
    ts = [int(f["t"]) for k, f in recs if "t" in f]
    assert ts == sorted(ts)
    declared = set()
    for k, f in recs:
        if k == "kernel":
            declared.add(f["id"])
        elif k == "launch":
            assert f["k"] in declared
    allocs = [f for k, f in recs if k == "alloc"]
    assert all(f["api"] == "cudaMallocAsync" and f["s"] == "0" for f in allocs)
    assert kinds[-1] == "end"


def test_committed_gpt_trace_is_current(gpt):
    _, _, _, out = gpt
    assert out.read_bytes() == (DATA / "gpt24-b1.trace").read_bytes(), \
        "tests/replay/data/gpt24-b1.trace is stale: remake it as tests/replay/data/README.md says"


def test_gpt_layers_through_a_call_wrapper(tmp_path):
    """The block called through a wrapper, as transformers' GradientCheckpointingLayer
    does (its __call__ between the loop and the block's forward): still the block,
    called from the loop's function."""
    snap = pickle.loads(gzip.decompress(GPT_HIST.read_bytes()))
    wrapper = {"name": "__call__", "line": 94,
               "filename": "/opt/venv/lib/python3.12/site-packages/transformers/modeling_layers.py"}
    n = 0
    for e in snap["device_traces"][0]:
        fr = e.get("frames") or []
        for k, f in enumerate(fr):
            if f["name"] == "forward" and f["line"] == 47 and f["filename"].endswith("capture.py"):
                fr.insert(k, dict(wrapper))
                n += 1
                break
    assert n > 600
    p = tmp_path / "wrapped.pickle"
    p.write_bytes(pickle.dumps(snap))
    rc, lines, _, _ = convert(tmp_path, "--et", GPT_ET, "--alloc-history", p)
    assert rc == 0
    assert line(lines, "layers") == "aoshim-replay: layers: 24 x Block from GPT.forward (frames)"


# --- gpu-check's GPT on the H200, in deterministic mode ---------------------------------------
@pytest.fixture(scope="module")
def gpt16(tmp_path_factory):
    return convert(tmp_path_factory.mktemp("gpt16"), "--et", G16 / "step.et.json.gz",
                   "--alloc-history", G16 / "step.alloc-history.pickle.gz",
                   "--profile", G16 / "step.torch-profile.json.gz")


def replay(trace, *args):
    """The figures of `aoshim-replay run`'s last line, on the meson build's simulator."""
    if not (BUILD / "tests" / "replay" / "replay").is_file():
        pytest.skip(f"no replay program in {BUILD} (ninja -C build)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AOSHIM_", "SIM_")) and k != "LD_PRELOAD"}
    env["AOSHIM_QUIET"] = "1"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "aoshim-replay"), "run", str(trace),
                        "--build", str(BUILD), *map(str, args)],
                       env=env, capture_output=True, text=True, timeout=120)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    assert last.startswith("replay status="), p.stdout + p.stderr
    return dict(w.split("=", 1) for w in last.split()[1:])


def test_gpt16_join(gpt16):
    """Every storage pairs with an allocation, though both sides have what the
    other lacks (a deterministic reduction's scratch, the 0-dim tensor a
    resize_ makes after its new storage) and some made in the other order."""
    rc, lines, recs, _ = gpt16
    assert rc == 0
    j = line(lines, "join")
    assert j.startswith("aoshim-replay: join: 1 of 1730 new storages match the history's "
                        "allocations in order; it first fails at new storage #2: op #28 "
                        "aten::empty (top-level op aten::arange), storage 31 of 8 bytes"), j
    assert ("aligned by size: 1730 matched (20 of them made in another order nearby), 132 "
            "allocations the trace does not show, 0 storages without one; 588 of 588 storages "
            "found in place") in j, j
    assert tracecheck.Account(recs).bad == []


def test_gpt16_replay_peak_is_the_historys(gpt16):
    _, lines, _, out = gpt16
    _, hist = history_peak(G16 / "step.alloc-history.pickle.gz")
    assert abs(hist / GIB - 20.51) < 0.01
    fig = replay(out, "--link", "55", "--check")
    assert (fig["status"], fig["faults"], fig["races"], fig["wrong"]) == ("ok", "0", "0", "0"), fig
    peak = int(fig["peak_device_bytes"])
    assert abs(peak - hist) <= 0.05 * hist, (peak / GIB, hist / GIB)
    assert "in the backward at autograd::engine::evaluate_function: NllLossBackward0" in line(lines, "peak")


def test_gpt16_replay_under_all(gpt16):
    """Under aoshim, every layer offloaded: no fault, no race, no wrong byte
    (scaled: --check of 20 GiB unscaled takes a minute)."""
    if not (BUILD / "src" / "libaoshim.so").is_file():
        pytest.skip(f"no libaoshim.so in {BUILD}")
    fig = replay(gpt16[3], "--link", "55", "--check", "--scale", "64",
                 "--shim", BUILD / "src" / "libaoshim.so", "AOSHIM_OFFLOAD_LAYERS=all")
    assert (fig["status"], fig["faults"], fig["races"], fig["wrong"]) == ("ok", "0", "0", "0"), fig


# A model the converter was not written against, traced on the H200
# (2026-11-27): Hugging Face GPT2LMHeadModel, 12 x 1536, eager attention.
G2 = DATA / "h200-2026-11-27" / "gpt2"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return convert(tmp_path_factory.mktemp("gpt2"), "--et", G2 / "step.et.json.gz",
                   "--alloc-history", G2 / "step.alloc-history.pickle.gz")


def test_gpt2_layers_join_and_peak(gpt2):
    """Its 12 blocks found from the frames; the join pairs nearly every new
    storage (by size: the embedding's indices are made before the history's
    first allocation); the peak is the history's, in the loss's backward."""
    rc, lines, recs, _ = gpt2
    assert rc == 0
    assert line(lines, "layers").startswith("aoshim-replay: layers: 12 x "), line(lines, "layers")
    j = line(lines, "join")
    assert "aligned by size: 1495 matched" in j and "1 storages without one" in j, j
    p = line(lines, "peak")
    assert "17.85 GiB live, in the backward" in p and "(the history's own: 17.85 GiB)" in p, p
    assert tracecheck.Account(recs).bad == []


def test_gpt2_replay(gpt2):
    """Without aoshim the history's peak within 5%, and under all (scaled):
    no fault, no race, no wrong byte."""
    _, _, _, out = gpt2
    _, hist = history_peak(G2 / "step.alloc-history.pickle.gz")
    fig = replay(out, "--link", "55", "--check", "--scale", "16")
    assert (fig["status"], fig["faults"], fig["races"], fig["wrong"]) == ("ok", "0", "0", "0"), fig
    fig = replay(out, "--link", "55")
    assert abs(int(fig["peak_device_bytes"]) - hist) <= 0.05 * hist, (fig, hist / GIB)
    if not (BUILD / "src" / "libaoshim.so").is_file():
        pytest.skip(f"no libaoshim.so in {BUILD}")
    fig = replay(out, "--link", "55", "--check", "--scale", "64",
                 "--shim", BUILD / "src" / "libaoshim.so", "AOSHIM_OFFLOAD_LAYERS=all")
    assert (fig["status"], fig["faults"], fig["races"], fig["wrong"]) == ("ok", "0", "0", "0"), fig


def test_pair_nearby():
    """What the alignment leaves over pairs up where the runs made two storages in
    the other order, but never so that the trace allocates an address twice."""
    def pairs(a, b, addrs):
        return C._pair_nearby(a, b, C._align(a, b), addrs)

    # A 8 and a 64 swapped: both pair, one out of order.
    assert pairs([1, 8, 64, 2], [1, 64, 8, 2], [0, 1, 2, 3]) == ([(0, 0), (1, 2), (2, 1), (3, 3)], 1)
    # The same, where the history gave the 8 the 64's address after freeing it:
    # the trace cannot allocate the 8 there before the 64.
    got, crossed = pairs([1, 8, 64, 2], [1, 64, 8, 2], [0, 1, 1, 3])
    assert len(got) == 3 and crossed == 0
    # Two 0-dim tensors, each made after its storage in the history (at one
    # address, freed in between): each pairs with its own, in order.
    assert pairs([5, 4, 32, 4, 16], [5, 32, 4, 16, 4], [0, 1, 9, 2, 9]) == (
        [(0, 0), (1, 2), (2, 1), (3, 4), (4, 3)], 2)
    # Nothing of that size near (within 4 pairs): left alone.
    got, crossed = pairs([7, 1, 2, 3, 4, 5, 6, 8, 9], [1, 2, 3, 4, 5, 6, 8, 9, 7], list(range(9)))
    assert got == [(i + 1, i) for i in range(8)] and crossed == 0


# --- the GPT from its execution trace alone ---------------------------------------------------
def test_gpt_without_history(gpt_et_only):
    rc, lines, recs, _ = gpt_et_only
    assert rc == 0
    assert not any("join" in ln for ln in lines)
    assert line(lines, "layers") == ("aoshim-replay: layers: 24 x a block of 19 ops, each with "
                                     "weights of its own (execution trace)")
    acc = tracecheck.Account(recs)
    assert acc.bad == []
    assert [L for op, L in acc.layers if op == "backward_begin"] == list(range(23, -1, -1))
    assert acc.counts["memset"] == 3  # zero fills: the embedding and nll_loss gradients
    # Lifetimes from first write to last read (gradients until zero_grad) come within
    # 5 % of the history's peak, in the same place.
    _, hist = history_peak()
    assert abs(acc.peak - hist) <= 0.05 * hist, (acc.peak / GIB, hist / GIB)
    assert acc.peak_phase == "optimizer"
    addrs = [int(f["addr"], 16) for k, f in recs if k == "alloc"]
    assert all(a % 512 == 0 for a in addrs) and len(set(addrs)) == len(addrs)


# --- a Hugging Face Llama traced on the CPU ------------------------------------------------------
def test_llama_cpu(llama):
    rc, lines, recs, _ = llama
    assert rc == 0
    assert line(lines, "layers") == ("aoshim-replay: layers: 4 x a block of 63 ops, each with "
                                      "weights of its own (execution trace)")
    acc = tracecheck.Account(recs)
    assert acc.bad == []
    assert [L for op, L in acc.layers if op == "begin"] == [0, 1, 2, 3]
    assert [L for op, L in acc.layers if op == "backward_begin"] == [3, 2, 1, 0]
    # 217 storages in place (weights, AdamW's state) and 930 made in the step, each
    # one allocation (a step traced with the CPU allocations alongside shows 930
    # whatever addresses malloc reuses; taking a storage an mm, sum, pow, mean or
    # cat makes at a reused address for the old one there gave 832 to 867).
    assert acc.counts["alloc"] == 217 + 930 and acc.counts["free"] == 930
    # The cross-entropy over the vocabulary holds the step's peak: its log-softmax's
    # backward, with the logits, their log-softmax and its gradient live.
    assert acc.peak == 179_750_700
    assert acc.peak_phase == "backward"
    assert "LogSoftmaxBackward0" in line(lines, "peak")
    meta = {k: v for kind, f in recs if kind == "meta" for k, v in f.items()}
    assert meta["device"].startswith("cpu")
    kernels = {f["name"] for k, f in recs if k == "kernel"}
    assert {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::silu", "aten::rsqrt",
            "aten::_log_softmax", "aten::nll_loss_forward"} <= kernels


def _et_node(i, name, parent, ins=(), outs=(), schema=""):
    """One execution-trace node; tensors as (storage id, elements), 4 bytes each."""
    def vals(ts):
        return {"values": [[1000 + i * 10 + k, sid, 0, n, 4, "cuda:0"] for k, (sid, n) in enumerate(ts)],
                "shapes": [[n] for _, n in ts], "strides": [[1] for _ in ts],
                "types": ["Tensor(float)"] * len(ts)}
    return {"id": i, "name": name, "ctrl_deps": parent, "inputs": vals(ins), "outputs": vals(outs),
            "attrs": [{"name": "op_schema", "type": "string", "value": schema},
                      {"name": "tid", "type": "uint64", "value": 1}]}


def test_new_storage_where_a_child_reads_it_first():
    """An op's output that no descendant creates is a new storage, though the id
    (an address) was seen before and the op's own child reads it first (CPU mm's
    resolve_conj): each life keeps its own size and lifetime, and the new storage
    is made by the innermost op that outputs it (mm, not matmul)."""
    mm = "aten::mm(Tensor self, Tensor mat2) -> Tensor"
    nodes = [
        _et_node(1, "[pytorch|profiler|execution_trace|process]", 0),
        _et_node(2, "[pytorch|profiler|execution_trace|thread]", 1),
        _et_node(3, "aten::mul", 2, [(100, 64), (101, 64)], [(200, 64)],
                 "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"),
        _et_node(4, "aten::neg", 2, [(200, 64)], [(201, 64)], "aten::neg(Tensor self) -> Tensor"),
        # 200's first life ends at the neg; the allocator hands its address to the mm.
        _et_node(5, "aten::matmul", 2, [(100, 64), (101, 64)], [(200, 1024)],
                 "aten::matmul(Tensor self, Tensor other) -> Tensor"),
        _et_node(6, "aten::mm", 5, [(100, 64), (101, 64)], [(200, 1024)], mm),
        _et_node(7, "aten::resolve_conj", 6, [(200, 1024)], [(200, 1024)],
                 "aten::resolve_conj(Tensor(a) self) -> Tensor(a)"),
        _et_node(8, "aten::relu", 2, [(200, 1024)], [(202, 1024)], "aten::relu(Tensor self) -> Tensor"),
    ]
    step = C.Step({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes})
    made = [(b.birth.name, b.sid, b.size) for b in step.buffers if not b.pre]
    assert made == [("aten::mul", 200, 256), ("aten::neg", 201, 256), ("aten::mm", 200, 4096),
                    ("aten::relu", 202, 4096)]
    first, second = (b for b in step.buffers if b.sid == 200)
    neg_exit = next(i for i, (k, x) in enumerate(step.events) if k == "exit" and x.name == "aten::neg")
    assert first.last == neg_exit < second.first
    # An op that is handed its output (resolve_conj, an in-place op) makes none.
    assert not any(b.birth is not None and b.birth.name == "aten::resolve_conj" for b in step.buffers)


def test_committed_llama_trace_is_current(llama):
    _, _, _, out = llama
    assert out.read_bytes() == (DATA / "llama4-cpu.trace").read_bytes(), \
        "tests/replay/data/llama4-cpu.trace is stale: remake it as tests/replay/data/README.md says"


def test_trace_cpu_model_records_a_step(tmp_path):
    """The recording script itself, where torch and transformers are installed."""
    probe = subprocess.run([sys.executable, "-c", "import torch, transformers"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("torch or transformers not installed")
    et = tmp_path / "two.et.json.gz"
    subprocess.run([sys.executable, str(HERE / "trace_cpu_model.py"), "-o", str(et), "--layers", "2",
                    "--hidden", "64", "--heads", "2", "--vocab", "512", "--seq", "32"],
                   check=True, capture_output=True, timeout=300)
    rc, lines, recs, _ = convert(tmp_path, "--et", et)
    assert rc == 0 and re.match(r"aoshim-replay: layers: 2 x ", line(lines, "layers"))
    assert tracecheck.Account(recs).bad == []


# --- malformed inputs: one line, status 2 --------------------------------------------------------
def one_error(tmp_path, *args):
    rc, lines, _, _ = convert(tmp_path, *args)
    assert rc == 2, lines
    assert len(lines) == 1 and lines[0].startswith("aoshim-replay: error: "), lines
    return lines[0]


def test_missing_file(tmp_path):
    msg = one_error(tmp_path, "--et", tmp_path / "nope.et.json.gz")
    assert "nope.et.json.gz" in msg and "No such file" in msg
    msg = one_error(tmp_path, "--et", GPT_ET, "--alloc-history", tmp_path / "nope.pickle")
    assert "--alloc-history" in msg and "No such file" in msg


def test_pickle_that_is_not_a_snapshot(tmp_path):
    p = tmp_path / "list.pickle"
    p.write_bytes(pickle.dumps([1, 2, 3]))
    assert "not an allocator snapshot" in one_error(tmp_path, "--et", GPT_ET, "--alloc-history", p)
    p.write_bytes(pickle.dumps({"segments": []}))
    assert "device_traces" in one_error(tmp_path, "--et", GPT_ET, "--alloc-history", p)
    # A pickle that names a class is refused without running anything.
    p.write_bytes(pickle.dumps(pathlib.PurePosixPath("/x")))
    assert "names a class" in one_error(tmp_path, "--et", GPT_ET, "--alloc-history", p)
    p.write_bytes(b"not a pickle at all")
    assert "not an allocator snapshot pickle" in one_error(tmp_path, "--et", GPT_ET, "--alloc-history", p)


def test_et_of_another_schema(tmp_path):
    p = tmp_path / "other.et.json"
    p.write_text(json.dumps({"schema": "2.0.0-chakra.0.0.5", "nodes": []}))
    msg = one_error(tmp_path, "--et", p)
    assert "schema '2.0.0-chakra.0.0.5'" in msg and "1.x" in msg
    p.write_text(json.dumps({"traceEvents": []}))  # a profiler trace given as --et
    assert "not a PyTorch execution trace" in one_error(tmp_path, "--et", p)
    p.write_text("{ not json")
    assert "not JSON" in one_error(tmp_path, "--et", p)


def test_command_line_exit_status(tmp_path):
    """The module as a program: the error line and status 2, the trace and status 0."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "scripts"))
    r = subprocess.run([sys.executable, "-m", "aoshim_replay.convert", "--et", str(tmp_path / "x"),
                        "-o", str(tmp_path / "o")], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
