#!/bin/bash
# The fifth device call (2026-11-28): pages of 2, 32, 128 and 512 MiB moved
# while copies run, and idle: is the cost during copies per mapping or per byte?
cc -O2 -isystem /usr/local/cuda/include tests/bench/bench_vmm_load.c -o /tmp/bvl -ldl -lpthread || exit 1
for m in 2 32 128 512; do PAGE_MIB=$m timeout 60 /tmp/bvl 8 40 idle copies; done
