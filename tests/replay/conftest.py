# SPDX-License-Identifier: MIT
# The converter's tests need no torch: aoshim_replay is standard library only.
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
