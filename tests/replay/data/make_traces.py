#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the hand-made step traces of this folder (docs/trace-format.md):

  step4.trace  a 4-layer step: forward, loss, backward, an Adam-like
               optimizer; a compute stream (2) and a side stream (3) joined
               by events; the input copied in and the loss copied out on the
               side stream; a device-to-device copy and sets; the default
               pool's release threshold set as PyTorch sets it; one kernel per
               layer with pointers of unknown length and mode, as
               AOSHIM_RECORD writes them; durations on most launches, none on
               the activation kernel (the replay's model then).
  skip4.trace  the same step, but layer 3's forward also reads layer 0's
               output (a long skip connection): what an offloaded layer 0
               must come back for outside the schedule.

Run it again after changing it; the traces are committed, so the tests do
not depend on it. The other traces here are written by hand.
"""
import os
import sys

MiB = 1 << 20
LAYERS = 4


class Trace:
    def __init__(self):
        self.lines = []
        self.t = 0
        self.next_addr = 0x7F0000000000
        self.live = {}  # name -> (addr, size)
        self.total = 0
        self.peak = 0

    def w(self, line):
        self.lines.append(line)

    def tick(self, ns=1000):
        self.t += ns
        return self.t

    def alloc(self, name, size, s=2):
        addr = self.next_addr
        # Disjoint and 512-aligned, with a gap, as a converter makes them up.
        self.next_addr += (size + 2 * MiB + 511) // 512 * 512
        self.live[name] = (addr, size)
        self.total += size
        self.peak = max(self.peak, self.total)
        self.w(f"alloc t={self.tick()} api=cudaMallocAsync s={s} size={size} addr={addr:#x}")
        return addr

    def free(self, name, s=2):
        addr, size = self.live.pop(name)
        self.total -= size
        self.w(f"free t={self.tick()} api=cudaFreeAsync s={s} addr={addr:#x}")

    def ptr(self, name, mode=None, off=0, length=None):
        addr, size = self.live[name]
        p = f"{addr + off:#x}"
        if length is not None or mode is not None:
            p += f"+{size - off if length is None else length}"
        if mode:
            p += f":{mode}"
        return p

    def launch(self, k, ptrs, dur=None, s=2, grid="1024,1,1", block="256,1,1"):
        d = f" dur={dur}" if dur is not None else ""
        self.w(f"launch t={self.tick(5000)} k={k} s={s} grid={grid} block={block}{d} "
               f"ptr={','.join(ptrs)}")

    def layer(self, op, layer=None, s=2):
        lay = f" layer={layer}" if layer is not None else ""
        self.w(f"layer t={self.tick()} op={op}{lay} s={s}")


KERNELS = [
    (1, "init_weights"),
    (2, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"),
    (3, "void%20at::native::vectorized_elementwise_kernel<4,%20GeluCUDAKernelImpl>"),
    (4, "ampere_bf16_s16816gemm_bf16_64x64_nn"),
    (5, "cross_entropy_loss_fwd_bwd"),
    (6, "gemm_dgrad_wgrad"),
    (7, "gemm_dgrad_wgrad_input"),
    (8, "multi_tensor_apply_kernel%3Cadam%3E"),
    (9, "read_master_copy"),
]


def step4(skip):
    T = Trace()
    T.w("aoshim-trace 1")
    T.w("# " + ("skip4" if skip else "step4") + ".trace: written by make_traces.py")
    note = "4 layers, forward, backward, optimizer; two streams" + (
        "; layer 3 reads layer 0's output" if skip else "")
    T.w(f"meta source=convert program=make_traces.py device=simgpu total={80 << 30} steps=1 "
        f"note={note.replace(' ', '%20')}")
    T.w(f"pool t=0 op=attr pool=0 attr=release_threshold value={(1 << 64) - 1}")
    T.w("stream id=2 flags=1 prio=0")
    T.w("stream id=3 flags=1 prio=-1")
    T.w("event id=1 flags=2")
    T.w("event id=2 flags=2")
    for k, name in KERNELS:
        T.w(f"kernel id={k} name={name}")

    # --- setup: weights, gradients, optimizer moments (alive at the start) ---
    for L in range(LAYERS):
        T.alloc(f"W{L}", 4 * MiB)
        T.launch(1, [T.ptr(f"W{L}", "w")], dur=20000)
        for x in "GMV":
            T.alloc(f"{x}{L}", 4 * MiB)
            T.w(f"memset t={T.tick()} s=2 dst={T.live[f'{x}{L}'][0]:#x} n={4 * MiB} value=0")
    T.w(f"sync t={T.tick()} what=device")

    # --- the step ---
    T.alloc("X", 2 * MiB, s=3)
    T.w(f"copy t={T.tick()} s=3 kind=h2d dst={T.live['X'][0]:#x} n={2 * MiB} async=1 pinned=1")
    T.w(f"record t={T.tick()} ev=1 s=3")
    T.w(f"wait t={T.tick()} ev=1 s=2")
    T.w(f"phase t={T.tick()} name=forward")
    T.w(f"layer t={T.tick()} op=microbatch mb=0 s=2")
    for L in range(LAYERS):
        inp = "X" if L == 0 else f"A{L - 1}"
        T.layer("begin", L)
        T.alloc(f"H{L}", 8 * MiB)
        T.launch(2, [T.ptr(inp, "r"), T.ptr(f"W{L}", "r"), T.ptr(f"H{L}", "w")], dur=400000)
        T.alloc("T", 8 * MiB)
        T.launch(3, [T.ptr(f"H{L}", "r"), T.ptr("T", "w")])  # no dur: the replay's model
        T.alloc(f"A{L}", 8 * MiB)
        # As AOSHIM_RECORD writes pointers: no length, no mode.
        ptrs = [T.ptr("T"), T.ptr(f"W{L}"), T.ptr(f"A{L}")]
        if skip and L == LAYERS - 1:
            ptrs.append(T.ptr("A0", "r", length=8 * MiB))
        T.launch(4, ptrs, dur=400000)
        T.free("T")
        T.layer("end", L)
    last = f"A{LAYERS - 1}"
    T.alloc("LOSS", 4096)
    T.alloc(f"D{LAYERS - 1}", 8 * MiB)
    T.launch(5, [T.ptr(last, "r"), T.ptr("LOSS", "w"), T.ptr(f"D{LAYERS - 1}", "w")], dur=50000)
    T.w(f"record t={T.tick()} ev=2 s=2")
    T.w(f"wait t={T.tick()} ev=2 s=3")
    T.w(f"copy t={T.tick()} s=3 kind=d2h src={T.live['LOSS'][0]:#x} n=4096 async=1 pinned=1")

    T.w(f"phase t={T.tick()} name=backward")
    for L in reversed(range(LAYERS)):
        inp = "X" if L == 0 else f"A{L - 1}"
        T.layer("backward_begin", L)
        T.alloc("DT", 8 * MiB)
        T.launch(6, [T.ptr(f"D{L}", "r"), T.ptr(f"H{L}", "r"), T.ptr(f"W{L}", "r"),
                     T.ptr("DT", "w"), T.ptr(f"G{L}", "rw")], dur=800000)
        T.free(f"D{L}")
        if L == LAYERS - 1:
            T.free(last)  # read by the loss and by nothing after
        if L > 0:
            T.alloc(f"D{L - 1}", 8 * MiB)
            T.launch(7, [T.ptr("DT", "r"), T.ptr(inp, "r"), T.ptr(f"W{L}", "r"),
                         T.ptr(f"D{L - 1}", "w"), T.ptr(f"G{L}", "rw")], dur=800000)
        else:
            T.launch(7, [T.ptr("DT", "r"), T.ptr(inp, "r"), T.ptr(f"G{L}", "rw")], dur=400000)
        T.free("DT")
        T.free(f"H{L}")
        T.free(inp, s=2)
        T.layer("backward_end", L)

    T.w(f"phase t={T.tick()} name=optimizer")
    T.alloc("OPT", 24 * MiB)
    for L in range(LAYERS):
        T.launch(8, [T.ptr(f"G{L}", "r"), T.ptr(f"W{L}", "rw"), T.ptr(f"M{L}", "rw"),
                     T.ptr(f"V{L}", "rw"), T.ptr("OPT", "rw", off=L * 4 * MiB, length=4 * MiB)],
                 dur=100000)
    T.w(f"copy t={T.tick()} s=2 kind=d2d src={T.live['W0'][0]:#x} "
        f"dst={T.live['OPT'][0] + 16 * MiB:#x} n={4 * MiB} async=1")
    T.launch(9, [T.ptr("OPT", "r", off=16 * MiB, length=4 * MiB)], dur=20000)
    for L in range(LAYERS):
        T.w(f"memset t={T.tick()} s=2 dst={T.live[f'G{L}'][0]:#x} n={4 * MiB} value=0")
    T.free("OPT")
    T.w(f"sync t={T.tick()} what=stream s=3")
    T.free("LOSS")
    T.w(f"layer t={T.tick()} op=step_end")
    T.w(f"sync t={T.tick()} what=device")

    # --- teardown ---
    for name in list(T.live):
        T.free(name)
    T.w(f"end t={T.tick()}")
    return T


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, skip in (("step4", False), ("skip4", True)):
        T = step4(skip)
        with open(os.path.join(here, name + ".trace"), "w") as f:
            f.write("\n".join(T.lines) + "\n")
        print(f"{name}.trace: {len(T.lines)} lines, peak_device_bytes={T.peak}", file=sys.stderr)


if __name__ == "__main__":
    main()
