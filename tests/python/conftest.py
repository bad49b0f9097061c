# SPDX-License-Identifier: MIT
# Paths for the Python suite: the shim and the simulated GPU of a build tree
# (AO_BUILD, default build/ at the top of the repository).
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("AO_BUILD", ROOT / "build"))
SHIM = BUILD / "src" / "libaoshim.so"
SIM = BUILD / "tests" / "sim"
HERE = pathlib.Path(__file__).resolve().parent


def clean_env(**extra):
    """The environment without any AOSHIM_*, PYTORCH_* or preload of the caller's,
    and the programs' CPU work on one thread (OMP_NUM_THREADS=1, unless a test
    says otherwise): the tests compare bits of runs with and without the shim,
    and a reduction split across threads may add in another order when the
    machine is busy (gpu-check's self-test on torch 2.15, two cores beside
    the other tests: another loss at step 1 between two runs without aoshim)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AOSHIM_", "PYTORCH_", "SIM_")) and k not in
           ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


def run(argv, shim=False, sim=False, check=True, **env):
    """Run argv; shim: under LD_PRELOAD; sim: on the simulated GPU."""
    e = clean_env(**env)
    if shim:
        e["LD_PRELOAD"] = str(SHIM)
    if sim:
        e["LD_LIBRARY_PATH"] = str(SIM)
        e.setdefault("SIM_QUIET", "0")
    p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{argv} exited {p.returncode}\nstdout:\n{p.stdout}\n"
                             f"stderr:\n{p.stderr}")
    return p


def train(*args, **kw):
    return run([sys.executable, str(HERE / "train.py"), *args], **kw)


_baselines = {}


def baseline(*args, **env):
    """train.py without the shim, once per set of arguments in a session."""
    key = (args, tuple(sorted(env.items())))
    if key not in _baselines:
        _baselines[key] = train(*args, **env)
    return _baselines[key]


@pytest.fixture(scope="session", autouse=True)
def built():
    if not SHIM.exists():
        pytest.exit(f"{SHIM} not built: run scripts/build.sh first", returncode=2)
