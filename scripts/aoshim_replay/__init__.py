# SPDX-License-Identifier: MIT
"""aoshim-replay: real training steps on the simulated GPU.

``convert`` makes a step trace (docs/trace-format.md) from what PyTorch
records; ``run`` replays one. Standard library only: the tools run where
neither torch nor a GPU is installed.
"""
