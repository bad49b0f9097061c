// SPDX-License-Identifier: MIT
// A prefetch with a backward boundary to go maps a layer's chunks of a page
// or more and leaves those under a page for the next boundary (offload/
// engine.c, ao_reload): a chunk under a page cannot borrow a kept page, and
// mapping it cost the host a page given back and a handle made while the
// GPU's queue ran dry. Eight layers, each saving 64 MiB and 4 MiB; layer 0
// offloaded (AOSHIM_OFFLOAD_LAYERS=0) with a prefetch distance of 3, so it
// is reloaded at layer 4's backward and needed at layer 1's. In the first
// step a layer's buffers each have a chunk of their own (no plan yet, alloc.c);
// from the second, its saved set is one chunk. Prints, per step, whether
// layer 0's 64 MiB and 4 MiB buffers are mapped (the driver's
// cuMemGetAddressRange finds them) once layer 4's backward began, whether
// the 4 MiB one is once layer 3's began, and whether every buffer held its
// bytes in its backward.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "aoshim.h"

#define PROG "small_later"
#include "holds.h"

#define MIB    (1u << 20)
#define LAYERS 8
#define STEPS  2

static cudaStream_t s;

static int mapped(const void *p)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    return cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS;
}

int main(void)
{
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    for (int step = 0; step < STEPS; step++) {
        void *big[LAYERS], *small[LAYERS];
        int ok = 1, big_at4 = -1, small_at4 = -1, small_at3 = -1;
        for (int l = 0; l < LAYERS; l++) {
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync(&big[l], 64 * MIB, s));
            CHECK(cudaMemsetAsync(big[l], 0x10 + l, 64 * MIB, s));
            CHECK(cudaMallocAsync(&small[l], 4 * MIB, s));
            CHECK(cudaMemsetAsync(small[l], 0x40 + l, 4 * MIB, s));
            aoshim_try_layer_end(l);
        }
        // Layer 0's copy out done before the backward: its prefetch, not a
        // copy still under way, is what layer 4's boundary sees.
        CHECK(cudaDeviceSynchronize());
        for (int l = LAYERS - 1; l >= 0; l--) {
            aoshim_try_backward_begin(l);
            if (l == 4) big_at4 = mapped(big[0]), small_at4 = mapped(small[0]);
            if (l == 3) small_at3 = mapped(small[0]);
            ok &= holds(s, big[l], 64 * MIB, 0x10 + l) && holds(s, small[l], 4 * MIB, 0x40 + l);
            CHECK(cudaMemsetAsync(big[l], 3, 64 * MIB, s)); // the backward uses the layer
            aoshim_try_backward_end(l);
            CHECK(cudaFreeAsync(big[l], s));
            CHECK(cudaFreeAsync(small[l], s));
        }
        aoshim_try_step_end();
        CHECK(cudaStreamSynchronize(s));
        printf("step=%d big_at4=%d small_at4=%d small_at3=%d ok=%d\n", step, big_at4, small_at4,
               small_at3, ok);
    }
    return 0;
}
