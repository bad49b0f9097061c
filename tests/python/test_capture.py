# SPDX-License-Identifier: MIT
"""CUDA graph capture and torch.compile, as the driver sees them: no control
call while torch says a capture (or a compile) is under way, and the calls
resume after it.

A SIMULATION of capture state, not a real capture: this suite runs without a
GPU. In this process torch.cuda.is_initialized, is_current_stream_capturing
and current_stream (and torch.compiler.is_compiling) are replaced by flags the
test sets, the model runs on the CPU in eager mode, and aoshim's control
functions are replaced by recorders. What this checks is the driver's side
only: that each of its hooks (the blocks' forward, the autograd hooks of
backward, the optimizer's step) asks torch and stays silent while the answer
is yes. That torch answers yes inside a real capture, on each thread that runs
a hook, and what a replayed graph does with aoshim's buffers, need a GPU.
"""
import torch
import torch.nn as nn
import pytest

from conftest import ROOT


class Model(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.inp = nn.Linear(8, 8)  # so that the first block's input needs a gradient
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(n))

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return x.sum()


ONE_STEP = (["layer_begin 0", "layer_end 0", "layer_begin 1", "layer_end 1", "layer_begin 2",
             "layer_end 2", "backward_begin 2", "backward_end 2", "backward_begin 1",
             "backward_end 1", "backward_begin 0", "backward_end 0", "step_end"])


@pytest.fixture
def sim(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "src" / "python"))
    monkeypatch.setattr("sys.meta_path", list(__import__("sys").meta_path))  # offload() adds a finder
    import aoshim
    import aoshim.torch as at

    calls = []

    def recorder(name):
        def call(*args):
            calls.append(" ".join([name, *(str(a) for a in args if name != "set_stream")]))
            return 0
        return call

    for name in ("layer_begin", "layer_end", "backward_begin", "backward_end", "step_end",
                 "set_microbatch", "set_stream"):
        monkeypatch.setattr(aoshim, name, recorder(name))
    monkeypatch.setattr(aoshim, "set_frontend", lambda text: 0)
    # A fresh driver for this test: the hooks look it up by name when they run.
    monkeypatch.setattr(at, "_driver", at._Driver())
    monkeypatch.setattr(at, "_hooked", [])
    monkeypatch.setattr(at, "_optimizer_hook", None)

    class State:
        capturing = False
        compiling = False

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: State.capturing)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda *a: type("Stream", (), {"cuda_stream": 0x5000})())
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: State.compiling)

    torch.manual_seed(0)
    model = Model()
    at.offload(model.blocks)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(forward=None, backward=None, optimizer=None):
        """One training step; each part runs with the given state (None: as it is)."""
        def under(flags, fn):
            saved = State.capturing, State.compiling
            if flags:
                for k, v in flags.items():
                    setattr(State, k, v)
            try:
                return fn()
            finally:
                State.capturing, State.compiling = saved
        start = len(calls)
        loss = under(forward, lambda: model(torch.randn(4, 8)))
        under(backward, loss.backward)
        under(optimizer, opt.step)
        opt.zero_grad(set_to_none=True)
        return [c for c in calls[start:] if c != "set_stream"], calls[start:]

    yield step
    if at._optimizer_hook is not None:  # the global optimizer hook this test added
        at._optimizer_hook.remove()


def test_no_call_inside_capture(sim, capsys):
    assert sim()[0] == ONE_STEP
    # A whole step captured (forward, backward, optimizer): not one call.
    inside = dict(capturing=True)
    assert sim(inside, inside, inside)[1] == []
    assert sim()[0] == ONE_STEP  # and they resume after it
    # The backward alone captured: the forward's calls, none from autograd's
    # hooks; step_end after the capture closes the step.
    assert sim(backward=inside)[0] == ONE_STEP[:6] + ["step_end"]
    assert sim()[0] == ONE_STEP
    # The optimizer step alone captured: no step_end inside the capture. The
    # driver has not seen the step end, so the next pass is the step's next
    # microbatch (as it would be for every replay, which runs no hook at all).
    assert sim(optimizer=inside)[0] == ONE_STEP[:-1]
    assert sim()[0] == ["set_microbatch 1"] + ONE_STEP
    assert sim()[0] == ONE_STEP
    err = capsys.readouterr().err
    assert err.count("a block runs inside CUDA graph capture: not offloaded") == 1, err


def test_no_call_while_compiling(sim, capsys):
    assert sim()[0] == ONE_STEP
    # Forward and backward while torch says it compiles: nothing, and no
    # step_end for a step that marked nothing.
    compiling = dict(compiling=True)
    assert sim(compiling, compiling)[1] == []
    assert sim()[0] == ONE_STEP
    err = capsys.readouterr().err
    assert err.count("aoshim does not offload compiled blocks") == 1, err
