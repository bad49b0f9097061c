# SPDX-License-Identifier: MIT
"""PyTorch layer boundaries for aoshim, with no change to the program.

Under ``LD_PRELOAD=libaoshim.so`` the bootstrap calls ``_auto()`` once the
program has imported torch. At the first forward of a model aoshim picks its
block list (``find_blocks``) and from then on tells the engine, through the
control API:

- ``layer_begin``/``layer_end`` around each block's forward (module hooks);
- ``backward_begin``/``backward_end`` from autograd hooks on the tensors
  between blocks (they run on PyTorch's autograd thread; each passes that
  thread's current CUDA stream);
- a recomputation under ``torch.utils.checkpoint`` (the block's forward run
  again inside backward) as ``layer_begin``/``layer_end`` inside the block's
  backward, which the engine never offloads;
- ``set_microbatch`` when a forward starts again before the optimizer stepped
  (gradient accumulation, several passes per step), ``step_end`` after
  ``optimizer.step()``;
- under ``torch.distributed.pipelining``, the schedule's own microbatch ids:
  the stage's ``forward_one_chunk``/``backward_one_chunk`` say which
  microbatch runs (1F1B runs the forward of one after the backward of
  another), and the blocks of all the stages a rank holds are numbered
  through in stage order. The stage methods are interposed only once the
  program imports ``torch.distributed.pipelining``.

``AOSHIM_TORCH=auto|0|<dotted path>`` chooses automatic discovery, nothing,
or the block list named (``model.layers``, relative to the model called).
``offload(blocks)`` is the explicit form for models aoshim cannot read.
"""
import functools
import sys
import threading
import weakref

import torch
from torch import nn

import aoshim

__all__ = ["offload", "find_blocks", "get_cpu_offload_context", "mark_not_offload"]

_MAX_MB = 1024  # the engine's microbatch ids: 0 .. 1023


def _say(msg):
    sys.stderr.write("aoshim: torch: " + msg + "\n")


def _warn(msg):
    sys.stderr.write("aoshim: warning: torch: " + msg + "\n")


# --- finding the blocks -------------------------------------------------------------------
def _nparams(m):
    return sum(p.numel() for p in m.parameters())


def _is_block_list(m):
    """A ModuleList/Sequential of two or more blocks of one class, each a module of modules."""
    if not isinstance(m, (nn.ModuleList, nn.Sequential)):
        return False
    kids = list(m.children())
    return (len(kids) >= 2 and len({type(k) for k in kids}) == 1
            and any(True for _ in kids[0].children()))


def find_blocks(model):
    """The block lists of model: [(dotted path, list)], the largest by parameters first.

    The candidates are the outermost block lists (a list inside a block does
    not count). The largest is taken, and with it any other holding at least
    half as many parameters (an encoder and a decoder); layers are numbered
    through them in the model's own order.
    """
    found = []

    def walk(m, path):
        if _is_block_list(m):
            found.append((path, m, _nparams(m)))
            return
        for name, child in m.named_children():
            walk(child, f"{path}.{name}" if path else name)

    walk(model, "")
    found = [(p, m, n) for p, m, n in found if n > 0]
    if not found:
        return []
    top = max(n for _, _, n in found)
    return [(p, m) for p, m, n in found if 2 * n >= top]


def _resolve(model, path):
    try:
        m = model.get_submodule(path)
    except AttributeError:
        return None
    return m if isinstance(m, (nn.ModuleList, nn.Sequential)) and len(m) else None


# --- tensors in and out of a block ----------------------------------------------------------
def _tensors(x, depth=0):
    if isinstance(x, torch.Tensor):
        yield x
    elif depth < 3 and isinstance(x, (tuple, list)):
        for v in x:
            yield from _tensors(v, depth + 1)
    elif depth < 3 and isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v, depth + 1)


def _first_grad_tensor(x):
    return next((t for t in _tensors(x) if t.requires_grad), None)


def _pass_stream(local):
    """Tell the engine this thread's current CUDA stream (the one its layer's
    work runs on); the engine keeps one per thread, so only a change is passed
    on (local: a threading.local remembering the last one)."""
    if not torch.cuda.is_initialized():
        return
    s = torch.cuda.current_stream().cuda_stream
    if getattr(local, "stream", None) != s:
        local.stream = s
        aoshim.set_stream(s)


# --- the driver: one per process, shared by every hooked block ------------------------------
class _Driver:
    """Turns module and autograd hook events into a valid sequence of control calls.

    State per process, under one lock: hooks fire on the main thread
    (forward) and on PyTorch's autograd thread (backward).
    """

    def __init__(self):
        self.lock = threading.RLock()
        self.mb = 0  # the engine's current microbatch
        self.next_mb = 1  # the next fresh microbatch id within this step
        self.fwd_open = None  # (layer, mb) of the forward layer open
        self.recompute_open = None  # layer being recomputed in backward
        self.bwd_open = {}  # mb -> layer whose backward is open
        self.last_fwd = None  # (layer, mb) of the last forward layer
        self.backward_seen = False  # a backward ran since the last forward pass began
        self.active = False  # anything since the last step_end
        self.pipeline = False  # a pipeline stage exists: its schedule gives the microbatches
        self.chunk = None  # the schedule's microbatch running now (forward/backward_one_chunk)
        self.local = threading.local()  # per thread: the stream last passed
        self.said = set()

    def say_once(self, key, msg):
        if key not in self.said:
            self.said.add(key)
            _say(msg)

    def _stream(self):
        _pass_stream(self.local)

    def _use_mb(self, mb):
        if mb != self.mb:
            aoshim.set_microbatch(mb)
            self.mb = mb

    def _close_backward(self, mb):
        layer = self.bwd_open.pop(mb, None)
        if layer is not None:
            self._use_mb(mb)
            aoshim.backward_end(layer)

    def _close_all_backward(self):
        for mb in sorted(self.bwd_open):
            self._close_backward(mb)

    def _skip(self):
        # Compiled code and CUDA graph captures are left alone: a control
        # call can be neither traced into a graph nor replayed by one.
        if torch.compiler.is_compiling():
            self.say_once("compile", "a block runs under torch.compile: aoshim does not offload "
                          "compiled blocks")
            return True
        return self._capturing()

    def _capturing(self):
        # Also asked by the autograd hooks and the optimizer hook: a capture
        # may take in a backward or a whole step. (Not the compile check: a
        # compiled optimizer step would trace the hook and drop its step_end.)
        if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
            self.say_once("graph", "a block runs inside CUDA graph capture: not offloaded")
            return True
        return False

    # forward ---------------------------------------------------------------------------------
    def pre_forward(self, layer, args, kwargs):
        if self._skip():
            return
        with self.lock:
            if self.pipeline and self.chunk is None:
                # A stage's module run outside the schedule's chunks: torch's
                # metadata inference (a real forward and backward on sample
                # inputs before the first microbatch), or the program's own call.
                return
            if torch._C._current_autograd_node() is not None:
                # The block's forward inside backward: a recomputation
                # (activation checkpointing). It belongs to the backward of
                # this layer of the microbatch whose backward is running.
                if self.pipeline:
                    mb = self.chunk
                else:
                    mb = self.mb if self.mb in self.bwd_open else (self.last_fwd or (0, 0))[1]
                self._enter_backward(layer, mb)
                aoshim.layer_begin(layer)
                self.recompute_open = layer
                return
            # Nothing is saved for backward when grad is off and no input
            # needs one (evaluation); a reentrant checkpoint's forward runs
            # without grad but its inputs need grad: that is a training pass.
            grad_in = _first_grad_tensor((args, kwargs))
            if not torch.is_grad_enabled() and grad_in is None:
                return
            if self.fwd_open is not None:  # a block that raised: its layer never ended
                aoshim.layer_end(self.fwd_open[0])
                self.fwd_open = None
            if self.pipeline:
                # The schedule's microbatch; its other microbatches' backwards
                # stay open: each is closed by its own hooks or its chunk's end.
                self._use_mb(self.chunk)
            elif self.backward_seen or (self.last_fwd and layer <= self.last_fwd[0]):
                self._new_pass()
            self._stream()
            aoshim.layer_begin(layer)
            self.fwd_open = (layer, self.mb)
            self.last_fwd = (layer, self.mb)
            self.active = True
            if grad_in is not None:  # its gradient is ready once the block's backward is done
                mb = self.mb
                grad_in.register_hook(lambda g: self.input_grad(layer, mb))

    def _new_pass(self):
        # A forward starts again before the optimizer stepped: the next
        # microbatch (gradient accumulation, or a second pass in one step).
        self._close_all_backward()
        self.backward_seen = False
        if self.next_mb >= _MAX_MB:  # no optimizer step in sight: start a new step
            self._step_end()
            return
        self._use_mb(self.next_mb)
        self.next_mb += 1

    def post_forward(self, layer, output):
        if self._skip():
            return
        with self.lock:
            if self.recompute_open == layer:
                aoshim.layer_end(layer)
                self.recompute_open = None
                return
            if self.fwd_open is None or self.fwd_open[0] != layer:
                return  # not begun (evaluation) or already closed
            mb = self.fwd_open[1]
            aoshim.layer_end(layer)
            self.fwd_open = None
            out = _first_grad_tensor(output)
            if out is not None and out.grad_fn is not None:
                # Reached first in backward: this block's backward begins.
                out.register_hook(lambda g: self.output_grad(layer, mb))

    # backward (PyTorch's autograd thread) --------------------------------------------------------
    def _enter_backward(self, layer, mb):
        self.backward_seen = True
        if self.bwd_open.get(mb) == layer:
            return
        self._close_backward(mb)
        self._use_mb(mb)
        self._stream()
        aoshim.backward_begin(layer)
        self.bwd_open[mb] = layer

    def output_grad(self, layer, mb):
        if self._capturing():
            return
        with self.lock:
            self._enter_backward(layer, mb)

    def input_grad(self, layer, mb):
        if self._capturing():
            return
        with self.lock:
            if self.bwd_open.get(mb) == layer:
                self._close_backward(mb)

    # pipeline schedules (the stage methods' wrappers, on the schedule's thread) -------------------
    def chunk_begin(self, chunk):
        with self.lock:
            self.pipeline = True  # also for stages built before aoshim was watching
            prev = self.chunk
            if not 0 <= chunk < _MAX_MB:
                self.say_once("chunks", f"pipeline microbatch {chunk}: aoshim's ids go from 0 to "
                              f"{_MAX_MB - 1}; microbatches past that are not offloaded")
                chunk = None
            self.chunk = chunk
            return prev

    def chunk_end(self, prev, backward):
        with self.lock:
            # A backward whose first block's input needs no gradient (the
            # first stage's block fed straight from the data) has no hook to
            # end it: the chunk's end does.
            if backward and self.chunk is not None and not self._capturing():
                self._close_backward(self.chunk)
            self.chunk = prev

    # steps ------------------------------------------------------------------------------------
    def _step_end(self):
        self._close_all_backward()
        aoshim.step_end()
        self.mb, self.next_mb = 0, 1
        self.backward_seen = False
        self.last_fwd = None
        self.active = False

    def optimizer_stepped(self, *_args):
        if self._capturing():  # a whole step captured: nothing else was said either
            return
        with self.lock:
            if self.active and self.fwd_open is None:
                self._step_end()


_driver = _Driver()
_hooked = []  # (layer, block) in layer order, for tests and the report
_optimizer_hook = None
_explicit = True  # offload() called by the program, not by discovery


def offload(blocks, first_layer=0):
    """Mark each module of blocks as one layer, numbered from first_layer.

    The explicit form for a model whose blocks aoshim does not find (or to
    choose them): ``aoshim.torch.offload(model.layers)``. Returns the number of
    the next layer, so that several lists can be chained.
    """
    _stop_discovery()
    layer = first_layer
    for block in blocks:
        if any(b is block for _, b in _hooked):
            raise ValueError("aoshim.torch.offload: a block is already marked")
        L = layer
        block.register_forward_pre_hook(
            lambda m, args, kwargs, L=L: _driver.pre_forward(L, args, kwargs), with_kwargs=True)
        block.register_forward_hook(lambda m, args, out, L=L: _driver.post_forward(L, out),
                                    always_call=True)
        _hooked.append((L, block))
        layer += 1
    global _optimizer_hook
    if _optimizer_hook is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _optimizer_hook = register_optimizer_step_post_hook(_driver.optimizer_stepped)
    if _explicit:
        aoshim.set_frontend(f"torch aoshim.torch.offload: {len(_hooked)} layers")
    _watch_pipelining()
    return layer


# --- automatic discovery ------------------------------------------------------------------------
_seen = set()  # ids of modules examined, with their descendants
_discovery = None


def _stop_discovery():
    global _discovery
    if _discovery is not None:
        _discovery.remove()
        _discovery = None


def _describe(path, lst):
    kinds = type(lst[0]).__name__
    return f"{path or '(the model)'}: {len(lst)} x {kinds}"


def _examine(model, mode, stages=()):
    """Mark model's block lists; with stages (the pipeline stages this rank
    holds, model being one's module), those of every stage's module, numbered
    through in stage order."""
    models = [s.submod for s in stages] or [model]
    for mod in models:
        for m in mod.modules():
            _seen.add(id(m))
    name = ", ".join(dict.fromkeys(type(m).__name__ for m in models))
    lists = []  # (the module holding it, dotted path, list)
    for mod in models:
        if mode != "auto":
            lst = _resolve(mod, mode)
            lists += [(mod, mode, lst)] if lst is not None else []
        else:
            lists += [(mod, path, lst) for path, lst in find_blocks(mod)]
    if not lists:
        if any(_nparams(m) for m in models):
            if mode != "auto":
                _driver.say_once("path", f"AOSHIM_TORCH={mode}: no module list of that name in "
                                 f"{name}; nothing is offloaded")
            else:
                _driver.say_once("none", f"no repeated block list in {name} (an nn.ModuleList "
                                 "or nn.Sequential of two or more blocks of one class): nothing "
                                 "is offloaded; name one with AOSHIM_TORCH=<path> or call "
                                 "aoshim.torch.offload(blocks)")
        return False
    global _explicit
    total = sum(_nparams(m) for m in models)
    layer = 0
    _explicit = False
    try:
        for _, path, lst in lists:
            layer = offload(lst, layer)
    finally:
        _explicit = True
    if stages:
        ids = ", ".join(str(s.stage_index) for s in stages)
        found = "; ".join(f"{type(mod).__name__}.{_describe(p, lst)}" for mod, p, lst in lists)
        found = f"pipeline stage{'s' if len(stages) > 1 else ''} {ids}: {found}"
    else:
        found = f"{name}." + "; ".join(_describe(p, lst) for _, p, lst in lists)
    share = sum(_nparams(lst) for _, _, lst in lists) / total if total else 0
    text = f"{found} ({layer} layers, {share:.0%} of the parameters)"
    aoshim.set_frontend("torch " + text)
    if aoshim._verbose():
        _say("offloading " + text)
    return True


def _discover(module, args):
    if id(module) in _seen:
        return
    try:
        if _examine(module, _mode(), _rank_stages(module)):
            _stop_discovery()
    except Exception as e:  # never break the program over a boundary
        _stop_discovery()
        _warn(f"block discovery failed ({type(e).__name__}: {e}); nothing is offloaded")


def _mode():
    v = aoshim._env("AOSHIM_TORCH", "auto").strip() or "auto"
    return "off" if v.lower() in ("0", "false", "no", "off") else v


def _auto():
    """Called by the bootstrap once torch is imported in a preloaded process."""
    global _discovery
    if _mode() == "off" or _discovery is not None or _hooked:
        return
    _discovery = nn.modules.module.register_module_forward_pre_hook(_discover)
    _watch_pipelining()


# --- pipeline schedules (torch.distributed.pipelining) -------------------------------------------
# A schedule runs each microbatch through a stage with forward_one_chunk and
# backward_one_chunk, in its own order (1F1B: the forward of microbatch 2
# after the backward of 0), so the microbatch of a block's forward is the
# chunk id of the call it runs in, never a guess from the order of blocks.
# Only the stage base class is touched, and only once the program has
# imported the package itself: a program without pipelining never loads it.
_PIPELINING = "torch.distributed.pipelining"
_stages = weakref.WeakSet()  # the pipeline stages built in this process


def _rank_stages(module):
    """The stages this process holds, in stage order, if module is one's module; else ()."""
    stages = sorted(list(_stages), key=lambda s: s.stage_index)
    return stages if any(s.submod is module for s in stages) else ()


def _interpose_pipelining():
    base = sys.modules[_PIPELINING + ".stage"]._PipelineStageBase
    if "_aoshim" in base.__dict__:
        return
    base._aoshim = True
    init = base.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _stages.add(self)
        # From now on a block's forward outside a chunk (torch's metadata
        # inference) is not a training pass.
        _driver.pipeline = True

    def per_chunk(method, key, backward):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            chunk = args[0] if args else kwargs.get(key)
            prev = _driver.chunk_begin(chunk if isinstance(chunk, int) else -1)
            try:
                return method(self, *args, **kwargs)
            finally:
                _driver.chunk_end(prev, backward)
        return run

    base.__init__ = __init__
    base.forward_one_chunk = per_chunk(base.forward_one_chunk, "fwd_chunk_id", False)
    base.backward_one_chunk = per_chunk(base.backward_one_chunk, "bwd_chunk_id", True)


class _PipeliningWatcher:
    """First on sys.meta_path until the program imports torch.distributed.pipelining;
    once the package has run, its stage methods are interposed."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != _PIPELINING:
            return None
        if cls in sys.meta_path:
            sys.meta_path.remove(cls)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _interpose_safely()

        spec.loader.exec_module = exec_module
        return spec


def _interpose_safely():
    try:
        _interpose_pipelining()
    except Exception as e:  # pipelining works whatever aoshim does
        _warn(f"pipeline schedules not followed ({type(e).__name__}: {e}); their "
              "microbatches may be numbered wrongly")


def _watch_pipelining():
    if _PIPELINING in sys.modules:
        _interpose_safely()
    elif _PipeliningWatcher not in sys.meta_path:
        sys.meta_path.insert(0, _PipeliningWatcher)


# --- TransformerEngine's interface (_te.py) -------------------------------------------------------
from aoshim._te import get_cpu_offload_context  # noqa: E402


def mark_not_offload(*tensors):
    """TransformerEngine's mark_not_offload: the memory under these tensors stays on the device."""
    for t in tensors:
        if t is not None:
            aoshim.keep(t)
