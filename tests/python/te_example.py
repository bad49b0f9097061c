# SPDX-License-Identifier: MIT
# TransformerEngine's two CPU-offloading examples (its documentation's
# pytorch_basic_offload_example.py and pytorch_manual_offload_example.py), with
# the one import changed to aoshim's. Two more changes make them run here:
# the device is the CPU unless CUDA is available, and the tensors are smaller
# (2 x 16 x 1024 rather than 16 x 1024 x 1024). With --sim MIB each layer also
# keeps MIB MiB of device memory for its backward on the simulated GPU
# (simdev.py), so aoshim really moves memory under the calls.
#
#   te_example.py basic|manual [--te] [--steps N] [--sim MIB]
#
# Prints "sums <x.sum()> <grad sums>" per step as exact hex floats.
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("example", choices=["basic", "manual"])
p.add_argument("--te", action="store_true", help="TransformerEngine's own (when installed)")
p.add_argument("--steps", type=int, default=1)
p.add_argument("--sim", type=int, default=0, metavar="MIB")
args = p.parse_args()

if args.te:
    from transformer_engine.pytorch import get_cpu_offload_context
else:
    from aoshim.torch import get_cpu_offload_context

DEV = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

if args.sim:
    from simdev import Device, SavedOnDevice
    dev = Device(args.sim)

    class Linear(torch.nn.Linear):
        """A Linear layer that also keeps device memory until its backward."""
        tags = 0

        def __init__(self, *a):
            super().__init__(*a)
            self.tag, Linear.tags = Linear.tags, Linear.tags + 1

        def forward(self, x):
            return super().forward(SavedOnDevice.apply(x, self.tag, dev))

    torch.nn.Linear = Linear


def report(x, layers):
    grads = [float(l.weight.grad.sum()).hex() for l in layers]
    print("sums", float(x.detach().sum()).hex(), " ".join(grads), flush=True)
    for l in layers:
        l.weight.grad = None


num_layers = 12
offloaded_layers = 3
layers = [torch.nn.Linear(1024, 1024).to(DEV) for _ in range(num_layers)]
x0 = torch.randn(2, 16, 1024, device=DEV)

if args.example == "basic":
    # Get offloading context and sync function
    cpu_offload_context, sync_function = get_cpu_offload_context(
        enabled=True,
        model_layers=num_layers,
        num_layers=offloaded_layers,
    )
    for _ in range(args.steps):
        x = x0
        # Forward pass
        for i in range(num_layers):
            with cpu_offload_context:
                x = layers[i](x)
            x = sync_function(x)
        loss = x.sum()
        loss.backward()
        report(x, layers)
else:
    offload_stream = torch.cuda.Stream() if DEV == "cuda" else None
    cpu_offload_context, sync_function, manual_controller = get_cpu_offload_context(
        enabled=True,
        model_layers=num_layers,
        manual_synchronization=True,
        offload_stream=offload_stream,
    )
    for _ in range(args.steps):
        x = x0
        # Forward pass - manually trigger offload after each layer
        for i in range(num_layers):
            with cpu_offload_context:
                x = layers[i](x)
            x = sync_function(x)
            manual_controller.start_offload_layer(i)
        # Release GPU memory (each call waits for its layer's offload to complete)
        for i in range(num_layers):
            manual_controller.release_activation_forward_gpu_memory(i)
        # Start reloading before backward
        for i in range(num_layers - 1, -1, -1):
            manual_controller.start_reload_layer(i)
        # Backward pass
        loss = x.sum()
        loss.backward()
        report(x, layers)
