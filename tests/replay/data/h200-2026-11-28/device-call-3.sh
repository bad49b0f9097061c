#!/bin/bash
# The third device call (2026-11-28): the same page moves with 0, 100, 300,
# 600 and 1200 other pages mapped in the reservation (LIVE), idle and with
# the launch path busy.
cc -O2 -isystem /usr/local/cuda/include tests/bench/bench_vmm_load.c -o /tmp/bvl -ldl -lpthread || exit 1
for live in 0 100 300 600 1200; do LIVE=$live timeout 60 /tmp/bvl 8 100 idle launches; done
