# SPDX-License-Identifier: MIT
# TransformerEngine's get_cpu_offload_context over aoshim: TE's own two
# examples (te_example.py) with one import changed give the same bits as
# without the shim, make the control calls TE's schedule implies, and on the
# simulated GPU move each offloaded layer's device memory out and back.
import re
import sys
import warnings

import pytest

from conftest import BUILD, HERE, run

PKG = BUILD / "src" / "python"
L, OFFLOADED = 12, 3  # the examples' num_layers and offloaded_layers


def example(mode, *args, shim=False, sim=False, **env):
    argv = [sys.executable, str(HERE / "te_example.py"), mode, *args]
    if not shim:  # the program imports aoshim.torch itself: the build tree's copy
        env["PYTHONPATH"] = PKG
    return run(argv, shim=shim, sim=sim, **env)


def sums(out):
    return re.findall(r"^sums (.*)$", out, re.M)


def fwd(layers, offload=()):
    log = []
    for i in range(layers):
        log += [f"layer_begin {i} 0", f"layer_end {i} 0"]
        if i in offload:
            log.append(f"offload_layer {i} 0")
    return log


def bwd(layers, reload_at=None):
    """Backward of every layer; reload_at: {backward layer: layer reloaded when it begins}."""
    log = []
    for i in reversed(range(layers)):
        log.append(f"backward_begin {i} 0")
        if reload_at and i in reload_at:
            log.append(f"reload_layer {reload_at[i]} 0")
        log.append(f"backward_end {i} 0")
    return log


def expected_basic(steps):
    # TE's default schedule: layers 0 .. num_layers-1 offloaded; layer j
    # reloaded when the backward of j + model_layers - 1 - num_layers begins.
    lead = L - 1 - OFFLOADED
    step = fwd(L, range(OFFLOADED)) + bwd(L, {j + lead: j for j in range(OFFLOADED)})
    return steps_of(step, steps)


def steps_of(step, steps):
    # A new forward after a backward ends the step (the examples have no optimizer).
    return ["set_schedule 1 -1"] + sum(([*step, "step_end -1 -1"] for _ in range(steps)), [])[:-1]


def expected_manual(steps):
    # The example's own order: offload after each layer, release all, reload
    # all (last first), then the backward.
    step = (fwd(L, range(L)) + [f"release_layer {i} 0" for i in range(L)] +
            [f"reload_layer {i} 0" for i in reversed(range(L))] + bwd(L))
    return steps_of(step, steps)


EXPECTED = {"basic": expected_basic, "manual": expected_manual}


@pytest.mark.parametrize("mode", EXPECTED)
def test_te_example_control_log(tmp_path, mode):
    base = example(mode, "--steps", "2")
    shim = example(mode, "--steps", "2", shim=True, AOSHIM_CONTROL_LOG=tmp_path / "ctl.log")
    assert len(sums(base.stdout)) == 2
    assert sums(shim.stdout) == sums(base.stdout), "different bits under the shim"
    assert "Traceback" not in shim.stderr and "aoshim: warning" not in shim.stderr, shim.stderr
    assert (tmp_path / "ctl.log").read_text().splitlines() == EXPECTED[mode](2)


def summary(stderr, key):
    m = re.search(r"^aoshim: " + key + r"\s+(.*)$", stderr, re.M)
    assert m, f"no '{key}' in the summary:\n{stderr}"
    return m.group(1)


@pytest.mark.parametrize("mode,per_step", [("basic", OFFLOADED), ("manual", L)])
def test_te_example_moves_device_memory(mode, per_step):
    args = ["--steps", "2", "--sim", "4"]
    base = example(mode, *args, sim=True)
    shim = example(mode, *args, sim=True, shim=True)
    assert sums(shim.stdout) == sums(base.stdout)
    assert summary(shim.stderr, "layer offloads / reloads").startswith(
        f"{2 * per_step} / {2 * per_step} ")
    off, back = summary(shim.stderr, "offloaded / reloaded").split(" / ")
    assert off == back == f"{8 * per_step}.0 MiB"
    assert summary(shim.stderr, "late reloads").split()[0] == "0"
    sim_line = re.search(r"^simgpu: .*$", shim.stderr, re.M).group(0)
    assert " races=0 faults=0 " in sim_line, sim_line


# --- TE's argument checks and return shapes (in this process, without the shim) ----------------
@pytest.fixture
def te(monkeypatch):
    monkeypatch.syspath_prepend(str(PKG))
    import aoshim.torch
    return aoshim.torch


def test_te_shapes_and_checks(te, capsys):
    get = te.get_cpu_offload_context
    ctx, sync = get(enabled=False, num_layers=1, model_layers=4)
    assert sync("x") == "x"
    with ctx:
        pass
    ctx, sync, controller = get(enabled=False, model_layers=4, manual_synchronization=True)
    controller.start_offload_layer(0)  # does nothing
    assert len(get(enabled=True, num_layers=2, model_layers=4)) == 2
    assert len(get(enabled=True, model_layers=4, manual_synchronization=True)) == 3
    with pytest.raises(AssertionError, match="Cannot offload all layers"):
        get(enabled=True, num_layers=4, model_layers=4)
    with pytest.raises(ValueError, match="what to offload"):
        get(enabled=True, offload_activations=False, offload_weights=False)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        get(enabled=True, num_layers=1, model_layers=4, offload_weights=True)
    with pytest.warns(UserWarning, match="compute and copies cannot overlap"):
        get(enabled=True, num_layers=3, model_layers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get(enabled=True, num_layers=2, model_layers=4)  # full overlap: no warning
    # Manual synchronization ignores num_layers, as TE does.
    assert len(get(enabled=True, num_layers=9, model_layers=4, manual_synchronization=True)) == 3


def test_te_misuse_is_an_error(te):
    import torch
    ctx, sync = te.get_cpu_offload_context(enabled=True, num_layers=0, model_layers=2)
    with ctx:
        pass
    with pytest.raises(RuntimeError, match="before sync_function"):
        with ctx:
            pass
    sync(torch.ones(1))
    with pytest.raises(RuntimeError, match="outside the offload context"):
        sync(torch.ones(1))
