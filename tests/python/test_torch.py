# SPDX-License-Identifier: MIT
# PyTorch with no code change: the control calls aoshim makes for an unmodified
# training script (train.py) are exactly what the model's structure implies,
# the losses are the same bits with and without the shim, and on the
# simulated GPU the engine moves real device memory under those calls.
import re

import pytest

from conftest import BUILD, baseline, train


def expected(n, steps=2, accum=1, ckpt=False, first=0):
    """The control log of `steps` steps of `accum` microbatches through n blocks."""
    log = []
    for _ in range(steps):
        for mb in range(accum):
            if mb:
                log.append(f"set_microbatch -1 {mb}")
            log += [f"layer_{w} {first + L} {mb}" for L in range(n) for w in ("begin", "end")]
            for L in reversed(range(first, first + n)):
                log.append(f"backward_begin {L} {mb}")
                if ckpt:  # the recomputation, inside the block's backward
                    log += [f"layer_begin {L} {mb}", f"layer_end {L} {mb}"]
                log.append(f"backward_end {L} {mb}")
        log.append("step_end -1 -1")
    return log


def losses(out):
    return re.search(r"^losses (.*)$", out, re.M).group(1).split()


def control_log(tmp_path, *args, env=None):
    """Run train.py without and with the shim; the same losses; return the log lines."""
    log = tmp_path / "ctl.log"
    base = baseline(*args, **(env or {}))
    shim = train(*args, shim=True, AOSHIM_CONTROL_LOG=log, **(env or {}))
    assert losses(shim.stdout) == losses(base.stdout), "losses differ under the shim"
    assert "Traceback" not in shim.stderr
    return (log.read_text().splitlines() if log.exists() else []), shim


PATTERNS = {
    "gpt": (["--model", "gpt", "--layers", "4"], dict(n=4)),
    "llama": (["--model", "llama", "--layers", "3"], dict(n=3)),
    "sequential": (["--model", "seq", "--layers", "3"], dict(n=3)),
    "two_lists": (["--model", "two", "--layers", "2"], dict(n=4)),
    "ckpt_reentrant": (["--layers", "3", "--ckpt", "reentrant"], dict(n=3, ckpt=True)),
    "ckpt_nonreentrant": (["--model", "llama", "--layers", "3", "--ckpt", "nonreentrant"],
                          dict(n=3, ckpt=True)),
    "accumulation": (["--layers", "3", "--accum", "4"], dict(n=3, accum=4)),
    "accum_ckpt": (["--layers", "2", "--accum", "2", "--ckpt", "nonreentrant"],
                   dict(n=2, accum=2, ckpt=True)),
    "eval_between_steps": (["--layers", "3", "--eval"], dict(n=3)),
}


@pytest.mark.parametrize("name", PATTERNS)
def test_control_sequence(tmp_path, name):
    args, shape = PATTERNS[name]
    log, _ = control_log(tmp_path, *args)
    assert log == expected(**shape)


def test_explicit_form(tmp_path):
    # The program imports aoshim itself (installed, or here the build tree's copy).
    env = dict(PYTHONPATH=BUILD / "src" / "python")
    log, _ = control_log(tmp_path, "--layers", "3", "--explicit", env=env)
    assert log == expected(3)
    # Without the shim the calls do nothing, and that is said once.
    base = baseline("--layers", "3", "--explicit", **env)
    assert base.stderr.count("libaoshim.so is not loaded in this process") == 1, base.stderr


def test_named_block_list(tmp_path):
    log, _ = control_log(tmp_path, "--model", "llama", "--layers", "3",
                         env=dict(AOSHIM_TORCH="model.layers"))
    assert log == expected(3)


def test_bad_block_path_says_so(tmp_path):
    log, shim = control_log(tmp_path, "--model", "llama", env=dict(AOSHIM_TORCH="model.layerz"))
    assert log == []
    assert "AOSHIM_TORCH=model.layerz: no module list of that name in LlamaForCausalLM" in shim.stderr


def test_off(tmp_path):
    log, shim = control_log(tmp_path, env=dict(AOSHIM_TORCH="0"))
    assert log == [] and "aoshim: torch" not in shim.stderr


def test_no_blocks_says_so_once(tmp_path):
    log, shim = control_log(tmp_path, "--model", "flat")
    assert log == []
    lines = [x for x in shim.stderr.splitlines() if "no repeated block list in Flat" in x]
    assert len(lines) == 1, shim.stderr


def test_found_is_printed_under_verbose(tmp_path):
    _, shim = control_log(tmp_path, "--model", "gpt", "--layers", "3",
                          env=dict(AOSHIM_VERBOSE="1"))
    assert "aoshim: torch: offloading GPT.transformer.h: 3 x Block (3 layers," in shim.stderr


# --- on the simulated GPU: each block also keeps device memory for its backward --------------
SIM_PATTERNS = {
    "gpt": ["--layers", "6"],
    "llama": ["--model", "llama", "--layers", "6"],
    "ckpt_reentrant": ["--layers", "6", "--ckpt", "reentrant"],
    "ckpt_nonreentrant": ["--layers", "6", "--ckpt", "nonreentrant"],
    "accumulation": ["--layers", "6", "--accum", "4"],
}


def summary(stderr, key):
    m = re.search(r"^aoshim: " + key + r"\s+(.*)$", stderr, re.M)
    assert m, f"no '{key}' in the summary:\n{stderr}"
    return m.group(1)


@pytest.mark.parametrize("name", SIM_PATTERNS)
def test_sim_offloads_under_python_hooks(tmp_path, name):
    args = ["--sim", "4", "--steps", "3", *SIM_PATTERNS[name]]
    base = baseline(*args, sim=True)
    # 'all': the default ('auto') keeps a step that fits (these do) on the device.
    shim = train(*args, sim=True, shim=True, AOSHIM_OFFLOAD_LAYERS="all")
    assert losses(shim.stdout) == losses(base.stdout)
    off, back = summary(shim.stderr, "offloaded / reloaded").split(" / ")
    assert off == back and not off.startswith("0 B"), shim.stderr
    offloads, reloads = re.match(r"(\d+) / (\d+)", summary(shim.stderr, "layer offloads / reloads")).groups()
    assert int(offloads) > 0 and offloads == reloads
    assert summary(shim.stderr, "late reloads").split()[0] == "0"
    assert re.match(r"torch \w+\.(transformer\.h|model\.layers): 6 x \w+ \(6 layers, ",
                    summary(shim.stderr, "layers marked by"))
    sim_line = re.search(r"^simgpu: .*$", shim.stderr, re.M).group(0)
    assert " races=0 faults=0 " in sim_line, sim_line


def test_keep_and_stats(tmp_path):
    out = train("--sim", "4", "--layers", "4", "--keep", sim=True, shim=True).stdout
    assert re.search(r"^keep -3$", out, re.M)  # logits live in host memory: not a device buffer
    assert "stats ['kept_resident', 'late_reloads', 'offloaded_bytes', 'peak_device_bytes', " \
           "'pinned_host_bytes', 'reload_wait_ns', 'reloaded_bytes', 'tracked_buffers']" in out


# --- torch.compile: blocks compiled one by one keep their boundaries; a whole-model
# compile hides the blocks inside compiled code, and aoshim says so once ------------------------
def test_compile_blocks_keep_boundaries(tmp_path):
    log, _ = control_log(tmp_path, "--layers", "3", "--compile", "blocks")
    assert log == expected(3)


def test_compile_model_is_left_alone(tmp_path):
    log, shim = control_log(tmp_path, "--layers", "3", "--compile", "model")
    assert log == []
    assert shim.stderr.count("aoshim does not offload compiled blocks") == 1, shim.stderr


# --- torchrun: every rank runs its own aoshim, with its own control log (%r) ---------------------
def test_torchrun_ddp_each_rank(tmp_path):
    import sys
    from conftest import HERE, run
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "--master_port", str(29500 + (hash(str(tmp_path)) % 500)), str(HERE / "train.py"),
            "--layers", "3", "--ddp"]
    base = run(argv, OMP_NUM_THREADS=1)
    shim = run(argv, shim=True, OMP_NUM_THREADS=1, AOSHIM_CONTROL_LOG=tmp_path / "ctl.%r.log")
    # Two ranks share one pipe, and torchrun relays their lines as they come:
    # a line may lose its newline to the other rank's, so no anchors here.
    per_rank = lambda out: sorted(re.findall(r"losses ((?:0x[0-9a-f.]+p[+-]\d+ ?)+)", out))
    assert per_rank(shim.stdout) == per_rank(base.stdout)
    assert len(per_rank(base.stdout)) == 2
    for rank in (0, 1):
        assert (tmp_path / f"ctl.{rank}.log").read_text().splitlines() == expected(3), rank


# --- AOSHIM_OFFLOAD_LAYERS=auto under the Python hooks: the plan keeps the budget --------------
def test_sim_auto_keeps_the_budget():
    args = ["--sim", "4", "--steps", "4", "--layers", "6"]
    base = baseline(*args, sim=True)
    budget = 20 << 20  # the step needs 28 MiB: 6 blocks of 4 MiB and the 4 MiB of weights
    shim = train(*args, sim=True, shim=True, AOSHIM_OFFLOAD_LAYERS="auto", AOSHIM_BUDGET=budget)
    assert losses(shim.stdout) == losses(base.stdout)
    plan = summary(shim.stderr, "offload plan")
    assert plan.startswith("layers 0-") and "cannot be met" not in plan, plan
    sim_line = re.search(r"^simgpu: .*$", shim.stderr, re.M).group(0)
    assert " races=0 faults=0 " in sim_line, sim_line
    peak = int(re.search(r"peak_device_bytes=(\d+)", sim_line).group(1))
    assert peak <= budget, f"peak {peak} over the budget {budget}"


# --- the default policy is auto: a model that fits moves nothing and says why ----------------------
def test_sim_default_is_auto():
    args = ["--sim", "4", "--steps", "3", "--layers", "6"]
    base = baseline(*args, sim=True)
    shim = train(*args, sim=True, shim=True)  # no AOSHIM_* at all
    assert losses(shim.stdout) == losses(base.stdout)
    plan = summary(shim.stderr, "offload plan")
    assert plan.startswith("nothing offloaded: ") and plan.endswith("(plan 1)"), plan
    assert summary(shim.stderr, "offloaded / reloaded") == "0 B / 0 B", shim.stderr
    assert re.match(r"torch \w+\.transformer\.h: 6 x \w+ \(6 layers, ",
                    summary(shim.stderr, "layers marked by"))


# --- aoshim-run and torchrun, in either order: one report per rank, none from the launcher -----
@pytest.mark.parametrize("order", ["torchrun_outside", "aoshim_run_outside"])
def test_aoshim_run_and_torchrun_either_order(tmp_path, order):
    import json
    import sys
    from conftest import HERE, SIM, run
    tool = BUILD / "scripts" / "aoshim-run"
    port = str(29000 + (hash((str(tmp_path), order)) % 400))
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", port]
    script = [str(HERE / "train.py"), "--layers", "3", "--ddp", "--sim", "4"]
    wrap = [str(tool), "--report", str(tmp_path / "rep.%r.json"), "--"]
    if order == "torchrun_outside":
        argv = torchrun + ["--no-python"] + wrap + [sys.executable] + script
    else:
        argv = wrap + torchrun + script
    run(argv, sim=True, OMP_NUM_THREADS=1)
    reports = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("rep."))
    assert reports == ["rep.0.json", "rep.1.json"], reports
    docs = [json.loads((tmp_path / r).read_text()) for r in reports]
    assert [d["rank"] for d in docs] == [0, 1]
    assert docs[0]["pid"] != docs[1]["pid"]
