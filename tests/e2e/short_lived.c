// SPDX-License-Identifier: MIT
// A layer's buffer that does not live to the layer's backward (freed in the
// head, before the head's own allocation: the H200 Llama frees two 32 MiB
// buffers of every layer there) is served as the program's own from the
// step after it was seen (offload/alloc.c, LEARN_SHORT): its memory is the
// program's again at its free, where in the layer's chunk it stayed taken
// until the layer's backward ended. Four layers, each saving 64 MiB and
// making a 32 MiB buffer the head frees before it allocates 96 MiB of its
// own; layer 0 offloaded (AOSHIM_OFFLOAD_LAYERS=0), the others tracked and
// resident. Prints, per step, the device's memory in use by the driver's
// count (total less free) after the head's allocation, in MiB, and whether
// every buffer held its bytes (the short ones at their free, the saved ones
// in the backward, layer 0's after its reload).
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "aoshim.h"

#define PROG "short_lived"
#include "holds.h"

#define MIB    (1u << 20)
#define LAYERS 4
#define STEPS  4

static cudaStream_t s;

int main(void)
{
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    for (int step = 0; step < STEPS; step++) {
        void *act[LAYERS], *sh[LAYERS], *logits;
        int ok = 1;
        for (int l = 0; l < LAYERS; l++) {
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync(&act[l], 64 * MIB, s));
            CHECK(cudaMemsetAsync(act[l], 0x10 + l, 64 * MIB, s));
            CHECK(cudaMallocAsync(&sh[l], 32 * MIB, s));
            CHECK(cudaMemsetAsync(sh[l], 0x20 + l, 32 * MIB, s));
            aoshim_try_layer_end(l);
        }
        // The head: the short buffers read (layer 0's not: it is off the
        // device, and a read would reload it) and freed, then its own.
        for (int l = 0; l < LAYERS; l++) {
            if (l) ok &= holds(s, sh[l], 32 * MIB, 0x20 + l);
            CHECK(cudaFreeAsync(sh[l], s));
        }
        CHECK(cudaMallocAsync(&logits, 96 * MIB, s));
        CHECK(cudaMemsetAsync(logits, 0x7f, 96 * MIB, s));
        CHECK(cudaStreamSynchronize(s));
        size_t free_b = 0, total = 0;
        CHECK(cudaMemGetInfo(&free_b, &total));
        ok &= holds(s, logits, 96 * MIB, 0x7f);
        CHECK(cudaFreeAsync(logits, s));
        for (int l = LAYERS - 1; l >= 0; l--) {
            aoshim_try_backward_begin(l);
            ok &= holds(s, act[l], 64 * MIB, 0x10 + l);
            CHECK(cudaMemsetAsync(act[l], 3, 64 * MIB, s)); // the backward uses the layer
            aoshim_try_backward_end(l);
            CHECK(cudaFreeAsync(act[l], s));
        }
        aoshim_try_step_end();
        CHECK(cudaStreamSynchronize(s));
        printf("step=%d head_in_use_mib=%zu ok=%d\n", step, (total - free_b) / MIB, ok);
    }
    return 0;
}
