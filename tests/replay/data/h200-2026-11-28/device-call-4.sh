#!/bin/bash
# The fourth device call (2026-11-28): page moves while both copy engines
# carry 256 MiB copies to and from pinned host memory, as offloading does.
cc -O2 -isystem /usr/local/cuda/include tests/bench/bench_vmm_load.c -o /tmp/bvl -ldl -lpthread || exit 1
timeout 60 /tmp/bvl 8 100 idle copies
LIVE=600 timeout 60 /tmp/bvl 8 100 copies busy
