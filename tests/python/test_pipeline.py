# SPDX-License-Identifier: MIT
# Pipeline schedules (torch.distributed.pipelining) under torchrun, two CPU
# ranks over gloo: each rank's control log follows its schedule, microbatch by
# microbatch (1F1B runs the forward of one microbatch after the backward of
# another), the losses are the same bits as without the shim, and every rank
# writes its own control log and report.
import json
import re
import sys

import pytest

from conftest import HERE, SIM, run

# What each rank runs, from the schedules' definitions in torch (2 ranks,
# 4 microbatches): (F or B, stage, microbatch).
#   GPipe: all forwards, then all backwards.
#   1F1B: stage s warms up with (stages - s) forwards, then alternates
#   backward and forward, then the remaining backwards.
#   Interleaved 1F1B, stages r and r + 2 on rank r: torch's
#   _get_1f1b_rank_ops, which is what pipe.py prints as the schedule's order.
def _ops(text):
    return [(o[1], int(o[0]), int(o[2:])) for o in text.split()]


SCHEDULES = {
    "gpipe": {0: _ops("0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3"),
              1: _ops("1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3")},
    "1f1b": {0: _ops("0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3"),
             1: _ops("1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3")},
    "interleaved": {0: _ops("0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3"),
                    1: _ops("1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3")},
}


def expected(ops, blocks=2, steps=2):
    """The control log of a rank running ops each step: its stages' blocks
    numbered through in stage order, the microbatch set when it changes."""
    stages = sorted({s for _, s, _ in ops})
    log = []
    for _ in range(steps):
        mb = 0  # where each step starts
        for kind, stage, m in ops:
            if m != mb:
                log.append(f"set_microbatch -1 {m}")
                mb = m
            first = stages.index(stage) * blocks
            layers = range(first, first + blocks)
            if kind == "F":
                log += [f"layer_{w} {L} {m}" for L in layers for w in ("begin", "end")]
            else:
                log += [f"backward_{w} {L} {m}" for L in reversed(layers) for w in ("begin", "end")]
        log.append("step_end -1 -1")
    return log


def torchrun(*args, shim=False, sim=False, **env):
    # --standalone: a free port of its own, whatever else runs beside it.
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "2", str(HERE / "pipe.py"), *args]
    if sim:
        env.setdefault("LD_LIBRARY_PATH", SIM)
        env.setdefault("SIM_QUIET", "0")
    p = run(argv, shim=shim, OMP_NUM_THREADS=1, **env)
    assert "Traceback" not in p.stderr, p.stderr
    return p


# Two ranks share one pipe, and torchrun relays their lines as they come: a
# line may lose its newline to the other rank's, so no anchors here.
def losses(out):
    found = re.findall(r"losses (\d) ((?:0x[0-9a-f.]+p[+-]\d+ ?)+)", out)
    assert len(found) == 1, out  # the rank of the last stage
    return found[0][0], found[0][1].split()


_baselines = {}


def baseline(*args, sim=False):
    if (args, sim) not in _baselines:
        _baselines[(args, sim)] = torchrun(*args, sim=sim)
    return _baselines[(args, sim)]


def shim_run(tmp_path, *args, sim=False, base=None, **env):
    """pipe.py without and with the shim: the same losses; the shim's run and its logs."""
    p = torchrun(*args, shim=True, sim=sim, AOSHIM_CONTROL_LOG=tmp_path / "ctl.%r.log", **env)
    assert losses(p.stdout) == losses(baseline(*(base or args), sim=sim).stdout)
    # The engine took every call (a sequence it refused would say so).
    assert "aoshim: warning" not in p.stderr, p.stderr
    logs = {r: (tmp_path / f"ctl.{r}.log").read_text().splitlines() for r in (0, 1)}
    return p, logs


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_schedule_order(tmp_path, schedule):
    p, logs = shim_run(tmp_path, "--schedule", schedule)
    for rank in (0, 1):
        assert logs[rank] == expected(SCHEDULES[schedule][rank]), rank
    if schedule != "1f1b":
        # The order written above is the one torch's schedule declares. (Its
        # declared order for 1F1B's last stage reads F1 B0 F2 B1 F3 B2 F4 B3,
        # while it runs F0 B0 F1 B1 ...: the log above is what it runs.)
        for rank in (0, 1):
            order = re.search(rf"order {rank} ((?:\d[FB]\d+ ?)+)", p.stdout).group(1)
            assert _ops(order) == SCHEDULES[schedule][rank], order


def test_freed_stage_outputs(tmp_path):
    # Megatron-style output deallocation: a stage output's storage is replaced
    # once it is sent; its block's backward still begins and ends. The
    # losses are those of the plain 1F1B run.
    p, logs = shim_run(tmp_path, "--schedule", "1f1b", "--free-outputs",
                       base=("--schedule", "1f1b"))
    assert re.search(r"freed 0 8\b", p.stdout), p.stdout  # 4 microbatches x 2 steps
    for rank in (0, 1):
        assert logs[rank] == expected(SCHEDULES["1f1b"][rank]), rank


def test_sim_each_rank_its_own_report(tmp_path):
    # On the simulated GPU each block keeps device memory for its backward:
    # the engine offloads and reloads under the interleaved schedule, and each
    # rank (not the launcher, which never uses CUDA) writes its own report.
    args = ("--schedule", "interleaved", "--sim", "4")
    # AOSHIM_OFFLOAD_LAYERS=all: the default ('auto') keeps these small stages on the device.
    p, logs = shim_run(tmp_path, *args, sim=True, AOSHIM_REPORT=tmp_path / "rep.%r.json",
                       AOSHIM_OFFLOAD_LAYERS="all")
    for rank in (0, 1):
        assert logs[rank] == expected(SCHEDULES["interleaved"][rank]), rank
    assert sorted(f.name for f in tmp_path.glob("rep.*")) == ["rep.0.json", "rep.1.json"]
    reps = {r: json.loads((tmp_path / f"rep.{r}.json").read_text()) for r in (0, 1)}
    assert reps[0]["pid"] != reps[1]["pid"]
    for rank, rep in reps.items():
        s = rep["summary"]
        assert rep["rank"] == rank
        assert s["frontend"].startswith(f"torch pipeline stages {rank}, {rank + 2}: Stage.layers: "
                                        "2 x Block; Stage.layers: 2 x Block (4 layers, "), s
        assert s["offloaded_bytes"] == s["reloaded_bytes"] > 0, s
        assert s["late_reloads"] == 0, s
    # Both ranks and the launcher: no race, no fault on the simulated GPU.
    sims = re.findall(r"races=(\d+) faults=(\d+)", p.stderr)
    assert len(sims) == 3 and set(sims) == {("0", "0")}, p.stderr


def test_pipelining_is_not_imported_for_other_programs(tmp_path):
    # aoshim waits for the program to import torch.distributed.pipelining; a
    # program that does not, under the shim, never has it loaded.
    code = ("import sys, torch\n"
            "m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())"
            " for _ in range(3)])\n"
            "m(torch.randn(2, 4, requires_grad=True)).sum().backward()\n"
            "print('loaded', sorted(k for k in sys.modules if 'pipelining' in k))\n")
    p = run([sys.executable, "-c", code], shim=True, AOSHIM_CONTROL_LOG=tmp_path / "ctl.log")
    assert "loaded []" in p.stdout, p.stdout
    assert (tmp_path / "ctl.log").read_text().startswith("layer_begin 0 0\n")  # aoshim was on
