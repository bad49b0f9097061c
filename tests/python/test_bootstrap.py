# SPDX-License-Identifier: MIT
# The bootstrap touches Python interpreters only, and a Python program that
# never imports torch sees nothing of it: its environment, sys.path, modules
# and output are those of a run without the shim.
import os
import shutil
import sys

from conftest import BUILD, run

PROBE = r"""
import os, sys
print("PYTHONPATH", os.environ.get("PYTHONPATH"))
print("path", [p for p in sys.path if "aoshim" in p or p.endswith("boot")])
print("modules", sorted(m for m in sys.modules if m.startswith(("torch", "aoshim", "ctypes"))))
print("meta_path", len(sys.meta_path))
try:
    import sitecustomize
    print("sitecustomize", getattr(sitecustomize, "MARK", None))
except ImportError as e:
    print("sitecustomize", type(e).__name__)
"""


def probe(**kw):
    return run([sys.executable, "-c", PROBE], check=False, **kw)


def test_python_without_torch_is_untouched():
    base, shim = probe(), probe(shim=True)
    assert shim.returncode == base.returncode == 0
    assert shim.stderr == base.stderr == ""
    assert "sitecustomize ModuleNotFoundError" in shim.stdout.splitlines()
    lines = shim.stdout.splitlines()
    # One finder waits for torch on sys.meta_path; nothing else differs.
    assert [x for x in lines if not x.startswith(("meta_path", "path"))] == \
        [x for x in base.stdout.splitlines() if not x.startswith(("meta_path", "path"))]
    assert "PYTHONPATH None" in lines
    assert "modules []" in lines
    n = {s.split()[0]: int(s.split()[1]) for s in (base.stdout, shim.stdout)
         for s in s.splitlines() if s.startswith("meta_path")}
    assert int(shim.stdout.split("meta_path ")[1].split()[0]) == \
        int(base.stdout.split("meta_path ")[1].split()[0]) + 1, n


def test_user_pythonpath_and_sitecustomize_are_kept(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("MARK = 'users'\n")
    shim = probe(shim=True, PYTHONPATH=tmp_path)
    base = probe(PYTHONPATH=tmp_path)
    assert f"PYTHONPATH {tmp_path}" in shim.stdout.splitlines()
    assert "sitecustomize users" in shim.stdout.splitlines()
    assert "sitecustomize users" in base.stdout.splitlines()


def test_a_failing_user_sitecustomize_does_not_stop_the_program(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("raise ValueError('broken')\n")
    shim = probe(shim=True, PYTHONPATH=tmp_path)
    assert shim.returncode == 0
    assert "ValueError: broken" in shim.stderr


def test_non_python_process_is_untouched():
    env_bin = shutil.which("env")
    base, shim = run([env_bin]), run([env_bin], shim=True)
    # (aoshim chooses PyTorch's allocator for every process it is loaded in.)
    strip = lambda out: sorted(x for x in out.splitlines()
                               if not x.startswith(("LD_PRELOAD=", "PYTORCH_CUDA_ALLOC_CONF=")))
    assert strip(shim.stdout) == strip(base.stdout)
    assert "PYTHONPATH=" not in shim.stdout


def test_installed_layout_is_found(tmp_path):
    # The library looks for aoshim/python/boot beside itself (an installed prefix).
    lib = tmp_path / "lib"
    (lib / "aoshim").mkdir(parents=True)
    shutil.copy(BUILD / "src" / "libaoshim.so", lib)
    shutil.copytree(BUILD / "src" / "python", lib / "aoshim" / "python")
    p = run([sys.executable, "-c", "import sys; print('watching', any("
             "type(f).__name__ == 'type' and f.__name__ == '_TorchWatcher' "
             "for f in sys.meta_path))"],
            LD_PRELOAD=lib / "libaoshim.so", AOSHIM_VERBOSE=1)
    assert "watching True" in p.stdout
    assert f"Python bootstrap: {lib}/aoshim/python/boot" in p.stderr


def test_aoshim_without_the_shim_is_a_noop():
    code = ("import aoshim; print(aoshim.loaded(), aoshim.version(), aoshim.layer_begin(0), "
            "aoshim.step_end(), aoshim.stats())")
    p = run([sys.executable, "-c", code], PYTHONPATH=BUILD / "src" / "python")
    assert p.stdout.split() == ["False", "None", "-5", "-5", "{}"]
    assert p.stderr.count("libaoshim.so is not loaded") == 1


def test_aoshim_with_the_shim_reaches_the_library():
    code = "import aoshim; print(aoshim.loaded(), aoshim.version())"
    p = run([sys.executable, "-c", code], shim=True)
    assert p.stdout.split()[0] == "True" and p.stdout.split()[1].count(".") == 2
