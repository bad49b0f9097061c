# SPDX-License-Identifier: MIT
"""aoshim's control API for Python programs.

The library itself is preloaded (``LD_PRELOAD=libaoshim.so python train.py``);
this package reaches it through ctypes, in the process's global symbol scope,
so it never loads a second copy. Without the shim loaded every call is a
no-op that returns ``ENOTLOADED`` and says once why.

PyTorch programs need none of this: when the shim is preloaded, aoshim's
bootstrap finds the model's block list by itself (see ``aoshim.torch``).
"""
import ctypes
import os
import sys
import threading

__all__ = [
    "loaded", "version", "layer_begin", "layer_end", "backward_begin", "backward_end",
    "step_end", "set_microbatch", "set_stream", "keep", "stats", "report_now", "set_frontend",
    "set_schedule", "offload_layer", "release_layer", "reload_layer",
    "OK", "EINVAL", "ESTATE", "ENOTFOUND", "EDISABLED", "ENOTLOADED",
    "SCHEDULE_AUTO", "SCHEDULE_MANUAL",
]

# The codes of include/aoshim.h.
OK, EINVAL, ESTATE, ENOTFOUND, EDISABLED, ENOTLOADED = 0, -1, -2, -3, -4, -5
SCHEDULE_AUTO, SCHEDULE_MANUAL = 0, 1


class _Stats(ctypes.Structure):
    # aoshim_stats_t, in the header's order; the library fills what it knows.
    _fields_ = [("size", ctypes.c_size_t)] + [
        (name, ctypes.c_uint64) for name in (
            "peak_device_bytes", "offloaded_bytes", "reloaded_bytes", "tracked_buffers",
            "kept_resident", "late_reloads", "reload_wait_ns", "pinned_host_bytes")
    ]


# name -> (restype, argtypes): every entry point is declared, so ctypes never
# guesses (aoshim_version returns a char *, which ctypes would truncate to an
# int; a stream handle is a pointer, not an int).
_SIGNATURES = {
    "aoshim_layer_begin": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_layer_end": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_backward_begin": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_backward_end": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_step_end": (ctypes.c_int, []),
    "aoshim_set_microbatch": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_set_stream": (ctypes.c_int, [ctypes.c_void_p]),
    "aoshim_keep": (ctypes.c_int, [ctypes.c_void_p]),
    "aoshim_get_stats": (ctypes.c_int, [ctypes.POINTER(_Stats)]),
    "aoshim_report_now": (ctypes.c_int, []),
    "aoshim_version": (ctypes.c_char_p, []),
    "aoshim_set_frontend": (ctypes.c_int, [ctypes.c_char_p]),
    "aoshim_set_schedule": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_offload_layer": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_release_layer": (ctypes.c_int, [ctypes.c_int]),
    "aoshim_reload_layer": (ctypes.c_int, [ctypes.c_int]),
}


def _bind():
    try:
        scope = ctypes.CDLL(None)  # the process's global scope: the preloaded copy
        getattr(scope, "aoshim_version")
    except (OSError, AttributeError):
        return None
    fns = {}
    for name, (res, args) in _SIGNATURES.items():
        try:
            fn = getattr(scope, name)
        except AttributeError:  # an older library: that call stays a no-op
            continue
        fn.restype, fn.argtypes = res, args
        fns[name[len("aoshim_"):]] = fn
    return fns


_fns = _bind()
_warned = threading.Lock()
_said = False


def _absent(*_args):
    global _said
    with _warned:
        if not _said:
            _said = True
            sys.stderr.write(
                "aoshim: warning: libaoshim.so is not loaded in this process (start it with "
                "LD_PRELOAD=/path/to/libaoshim.so); aoshim calls do nothing\n")
    return ENOTLOADED


def _fn(name):
    return (_fns or {}).get(name, _absent)


def loaded():
    """True when libaoshim.so is preloaded into this process."""
    return _fns is not None


def version():
    """The library's version string, or None without the shim."""
    f = _fn("version")
    return f().decode() if f is not _absent else None


layer_begin = _fn("layer_begin")
layer_end = _fn("layer_end")
backward_begin = _fn("backward_begin")
backward_end = _fn("backward_end")
step_end = _fn("step_end")
set_microbatch = _fn("set_microbatch")
report_now = _fn("report_now")
# The manual schedule (aoshim.h): nothing moves unless the program says so.
set_schedule = _fn("set_schedule")
offload_layer = _fn("offload_layer")
release_layer = _fn("release_layer")
reload_layer = _fn("reload_layer")


def set_stream(stream):
    """The CUDA stream (a handle, an int, or a torch.cuda.Stream) this thread's layers run on."""
    handle = getattr(stream, "cuda_stream", stream)
    return _fn("set_stream")(ctypes.c_void_p(int(handle or 0)))


def keep(obj):
    """Never offload this buffer's layer: a device pointer (int) or a tensor (its data_ptr())."""
    ptr = obj.data_ptr() if hasattr(obj, "data_ptr") else int(obj)
    return _fn("keep")(ctypes.c_void_p(ptr))


def stats():
    """The engine's counters as a dict (empty without the shim)."""
    f = _fn("get_stats")
    if f is _absent:
        f()
        return {}
    s = _Stats(size=ctypes.sizeof(_Stats))
    if f(ctypes.byref(s)) != OK:
        return {}
    return {name: getattr(s, name) for name, _ in _Stats._fields_[1:]}


def set_frontend(text):
    """One line for the report saying who marks the layers (aoshim.torch uses it)."""
    f = _fn("set_frontend")
    if f is _absent:
        return ENOTLOADED if _fns is None else OK  # an older library: nothing to tell
    return f(text.encode("utf-8", "replace"))


def _env(name, default=None):
    """An environment variable as the library reads it: with a name given
    twice, getenv (and so aoshim's C side) sees the first, os.environ the last."""
    try:
        getenv = ctypes.CDLL(None).getenv
        getenv.restype, getenv.argtypes = ctypes.c_char_p, [ctypes.c_char_p]
        v = getenv(name.encode())
        return default if v is None else v.decode("utf-8", "replace")
    except (OSError, AttributeError):
        return os.environ.get(name, default)


def _verbose():
    try:
        return int(_env("AOSHIM_VERBOSE", "0") or 0)
    except ValueError:
        return 0
