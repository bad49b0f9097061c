# SPDX-License-Identifier: MIT
# aoshim's bootstrap. libaoshim.so, preloaded into a Python interpreter, puts
# this folder first on PYTHONPATH, so Python imports this file at start-up
# (site.py imports `sitecustomize`). It takes its folder off PYTHONPATH and
# sys.path again, makes the `aoshim` package importable (last on sys.path,
# never shadowing), runs the sitecustomize it shadowed, and waits for torch:
# a finder first on sys.meta_path answers only for the name "torch", and once
# torch's own module has run it starts aoshim.torch. A program that never
# imports torch keeps its environment and imports nothing more.
import sys


class _TorchWatcher:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(cls)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        torch_exec = spec.loader.exec_module

        def exec_module(module):
            torch_exec(module)
            try:
                import aoshim.torch

                aoshim.torch._auto()
            except Exception as e:  # torch works whatever aoshim does
                sys.stderr.write(f"aoshim: warning: torch support failed to start "
                                 f"({type(e).__name__}: {e}); nothing is offloaded\n")

        spec.loader.exec_module = exec_module
        return spec


def _aoshim_boot():
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    # The environment the program and its children see is the user's own.
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    kept = [p for p in parts if os.path.abspath(p) != here]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    pkg = os.path.dirname(here)
    if pkg not in sys.path:
        sys.path.append(pkg)

    # The sitecustomize this one shadowed, if the environment has one, found
    # and run with the import system's own (already loaded) pieces. What is
    # left in sys.modules under the name is what the import of this file
    # returns: the user's module, or None, so that a later `import
    # sitecustomize` fails as it would without aoshim.
    bootstrap = sys.modules["_frozen_importlib"]
    finder = next(f for f in sys.meta_path if getattr(f, "__name__", "") == "PathFinder")
    spec = finder.find_spec("sitecustomize", sys.path)
    sys.modules["sitecustomize"] = None
    if spec is not None and spec.loader is not None:
        mod = bootstrap.module_from_spec(spec)
        sys.modules["sitecustomize"] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as e:  # reported as site.py reports a failing sitecustomize
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             f"{type(e).__name__}: {e}\n")

    if os.environ.get("AOSHIM_TORCH", "auto").strip().lower() not in ("0", "false", "no", "off"):
        sys.meta_path.insert(0, _TorchWatcher)


try:
    _aoshim_boot()
except Exception as _e:  # the program runs whatever happens here
    sys.stderr.write(f"aoshim: warning: bootstrap failed ({type(_e).__name__}: {_e}); "
                     "nothing is offloaded\n")
