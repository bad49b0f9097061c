# SPDX-License-Identifier: MIT
"""TransformerEngine's ``get_cpu_offload_context``, with aoshim doing the moving.

A program written for TransformerEngine switches by changing one import::

    -from transformer_engine.pytorch import get_cpu_offload_context
    +from aoshim.torch import get_cpu_offload_context

The shapes are TransformerEngine's: ``(context, sync_function)``, or with
``manual_synchronization=True`` ``(context, sync_function, controller)``.
Each ``with context:`` is one layer (numbered 0 .. model_layers-1, then again
from 0); ``sync_function(x)`` on the layer's output marks where its backward
begins. What moves is what aoshim tracks: the device memory the layer
allocated (its outputs and the tensors it saved), at the same addresses, so
views and adjacency survive (TransformerEngine's saved-tensor hooks copy
tensors one by one and lose both).

aoshim runs this in its manual schedule (``aoshim.h``):

- default (``num_layers``): layers ``0 .. num_layers-1`` are offloaded, each
  copy starting once the next layer has ended; layer ``j`` is brought back
  when the backward of layer ``j + model_layers - 1 - num_layers`` begins,
  TransformerEngine's own reload point.
- manual: ``start_offload_layer(i)``, ``release_activation_forward_gpu_memory(i)``
  and ``start_reload_layer(i)`` are ``aoshim_offload_layer``,
  ``aoshim_release_layer`` and ``aoshim_reload_layer``. A copy still never
  starts before layer ``i+1`` has ended (or ``i`` is released): a write to
  ``i``'s output after its end is never lost. Releasing waits for the copy.

aoshim copies on its own streams: ``offload_stream`` is accepted and not used
(release already waits for the copy, so a program that synchronizes it
before releasing stays correct); ``double_buffering`` and
``retain_pinned_cpu_buffers`` are accepted and change nothing (aoshim's
pinned pool is kept across steps). Without the shim, the context and the
calls do nothing, as with ``enabled=False``.
"""
import contextlib
import threading
import warnings

import torch

import aoshim


class _Layers:
    """The control calls for one offload context: one per get_cpu_offload_context."""

    def __init__(self, model_layers, offloaded, reload_lead):
        self.model_layers = model_layers
        self.offloaded = offloaded  # default mode: layers 0 .. offloaded-1; manual: None
        self.reload_lead = reload_lead
        self.lock = threading.Lock()
        self.next_layer = 0
        self.current = None  # the layer entered last, until sync_function
        self.open = False  # its layer_begin was called (not under no_grad or a capture)
        self.last = None  # the last layer that ran forward (sync_function's)
        self.bwd_open = None  # the layer whose backward is open
        self.backward_seen = False
        self.local = threading.local()
        aoshim.set_schedule(aoshim.SCHEDULE_MANUAL)

    def _stream(self):
        # The autograd thread has its own current stream, and its own local.
        from aoshim import torch as aoshim_torch
        aoshim_torch._pass_stream(self.local)

    @staticmethod
    def _capturing():
        # A CUDA graph replays kernels, never control calls: a captured
        # region is left alone.
        return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()

    def enter(self):
        if self.current is not None:
            raise RuntimeError("aoshim offload context entered again before sync_function "
                               "was called on the previous layer's output")
        with self.lock:
            layer = self.next_layer
            self.next_layer = (layer + 1) % self.model_layers
            self.current = layer
            if not torch.is_grad_enabled() or self._capturing():
                return  # nothing is saved for backward (evaluation), or a capture
            if self.backward_seen:  # a new forward pass: the last one is over
                self._close_backward()
                aoshim.step_end()
                self.backward_seen = False
            self._stream()
            aoshim.layer_begin(layer)
            self.open = True

    def exit(self):
        with self.lock:
            if not getattr(self, "open", False):
                return
            self.open = False
            layer = self.current
            aoshim.layer_end(layer)
            if self.offloaded is not None and layer < self.offloaded:
                aoshim.offload_layer(layer)

    def sync(self, tensor):
        if self.current is None:
            raise RuntimeError("sync_function called outside the offload context's layers")
        layer, self.current = self.current, None
        self.last = layer
        if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
            tensor.grad_fn.register_prehook(lambda _g: self._backward(layer))
        return tensor

    # backward (PyTorch's autograd thread) ------------------------------------------------------
    def _backward(self, layer):
        with self.lock:
            if self.bwd_open == layer:
                return
            if not self.backward_seen:
                # The end of this backward pass closes its last layer.
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            self.backward_seen = True
            self._close_backward()
            self._stream()
            aoshim.backward_begin(layer)
            self.bwd_open = layer
            if self.offloaded is not None:
                # TransformerEngine's reload point: layer j comes back when
                # the backward of j + model_layers - 1 - num_layers begins.
                j = layer - self.reload_lead
                if 0 <= j < self.offloaded and self.reload_lead > 0:
                    aoshim.reload_layer(j)

    def _close_backward(self):
        if self.bwd_open is not None:
            aoshim.backward_end(self.bwd_open)
            self.bwd_open = None

    def _backward_done(self):
        with self.lock:
            self._close_backward()


class _Context(contextlib.ContextDecorator):
    def __init__(self, layers):
        self._layers = layers

    def __enter__(self):
        self._layers.enter()
        return self

    def __exit__(self, *exc):
        self._layers.exit()
        return False


class ManualOffloadSynchronizer:
    """The controller of manual_synchronization=True: the program says when each layer moves."""

    def __init__(self, layers):
        self._layers = layers

    def start_offload_layer(self, layer_id):
        """Copy layer_id to host memory (starting once the next layer has ended)."""
        aoshim.offload_layer(layer_id)

    def release_activation_forward_gpu_memory(self, layer_id):
        """Wait for layer_id's copy and give its device memory back."""
        aoshim.release_layer(layer_id)

    def start_reload_layer(self, layer_id):
        """Bring layer_id back now; its backward waits for it on the GPU."""
        aoshim.reload_layer(layer_id)


class _NoController:
    def start_offload_layer(self, layer_id):
        pass

    def release_activation_forward_gpu_memory(self, layer_id):
        pass

    def start_reload_layer(self, layer_id):
        pass


def _identity(x):
    return x


def get_cpu_offload_context(enabled=False, num_layers=1, model_layers=1, offload_activations=True,
                            offload_weights=False, double_buffering=False,
                            manual_synchronization=False, retain_pinned_cpu_buffers=False,
                            offload_stream=None):
    """TransformerEngine's get_cpu_offload_context, over aoshim (see the module's doc)."""
    del double_buffering, retain_pinned_cpu_buffers, offload_stream  # see the module's doc
    if not offload_weights and not offload_activations:
        raise ValueError("CPU Offloading is enabled while it is not mentioned what to offload "
                         "(weights/activations)")
    if offload_weights:
        warnings.warn("Offloading weights is deprecated. Using offload_weights=True does not "
                      "have any effect.", DeprecationWarning)
    if not isinstance(model_layers, int) or model_layers < 1:
        raise ValueError(f"model_layers must be a positive int, not {model_layers!r}")
    nothing = (contextlib.nullcontext(), _identity)
    if manual_synchronization:
        nothing += (_NoController(),)
    if not enabled or not offload_activations:
        return nothing
    if not manual_synchronization:
        assert num_layers is not None and 0 <= num_layers <= model_layers - 1, (
            "Cannot offload all layers without manual synchronization - last layer is not "
            "offloaded.")
        if num_layers == model_layers - 1 and model_layers > 1:
            warnings.warn(f"num_layers={num_layers} of model_layers={model_layers} leaves one "
                          "layer's activations on the GPU: compute and copies cannot overlap; "
                          "use model_layers - 2 or fewer for overlap")
    from aoshim import torch as aoshim_torch
    aoshim_torch._stop_discovery()  # the program marks its layers itself
    if manual_synchronization:
        layers = _Layers(model_layers, None, 0)
        aoshim.set_frontend(f"torch get_cpu_offload_context (manual): {model_layers} layers")
        return _Context(layers), layers.sync, ManualOffloadSynchronizer(layers)
    layers = _Layers(model_layers, num_layers, model_layers - 1 - num_layers)
    aoshim.set_frontend(f"torch get_cpu_offload_context: {num_layers} of {model_layers} layers")
    return _Context(layers), layers.sync
