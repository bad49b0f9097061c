# SPDX-License-Identifier: MIT
"""Run train_step under LD_PRELOAD=libaoshim.so on the simulated GPU, with the
same clean environment as the C harness (tests/e2e/e2e_run.c): the caller's
AOSHIM_* and SIM_* variables are dropped so they cannot change a figure."""
import os
import subprocess

WORKLOAD = "--layers 6 --hidden 512 --seq 512 --batch 2 --heads 8 --fused --steps 2"


def run(extra_env, preload=True, args=WORKLOAD):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AOSHIM_", "SIM_")) and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = os.environ["SIM_DIR"]
    env["SIM_QUIET"] = "1"
    if preload:
        env["LD_PRELOAD"] = os.environ["AO_TEST_SHIM"]
    env.update(extra_env)
    return subprocess.run([os.environ["TRAIN_STEP"]] + args.split(), env=env,
                          capture_output=True, text=True, timeout=120)
