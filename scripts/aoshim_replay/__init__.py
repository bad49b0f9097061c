# SPDX-License-Identifier: MIT
"""aoshim-replay's commands: convert (PyTorch's records to a step trace) and
run (a step trace on the simulated GPU). docs/replay.md, docs/trace-format.md."""
