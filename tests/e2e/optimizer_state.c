// SPDX-License-Identifier: MIT
// The program's first optimizer step served (after a backward, before the
// next forward) makes its state, which lives for the run: its segments end
// where the allocation does, to the granule, with a last part of their own
// size (offload/serve.c, segment_size); later optimizer steps' allocations
// of that size take whole pages. Three steps of four layers (`all`: the first
// two offloaded, so the program's allocations are served); in each
// optimizer, a 42 MiB allocation: kept in the first (the state), freed in
// the others (a temporary). Prints, for the state and for the second
// step's temporary, the bytes mapped past the allocation's end in the
// mapping that holds its last byte (the driver's cuMemGetAddressRange), in
// MiB, and whether the state held its bytes to the end.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "aoshim.h"

#define PROG "optimizer_state"
#include "check.h"

#define MIB    (1u << 20)
#define LAYERS 4
#define STATE  (42 * MIB) // a page and 10 MiB: whole pages leave 22 MiB unused

static cudaStream_t s;

// MiB mapped past p + n in the mapping that holds p's last byte.
static unsigned long past_end(void *p, size_t n)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    CHECK(cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p + n - 1));
    return (unsigned long)((base + size - ((CUdeviceptr)(uintptr_t)p + n)) / MIB);
}

int main(void)
{
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    void *state = NULL;
    unsigned long state_past = 0, temp_past = 0;
    for (int step = 0; step < 3; step++) {
        void *act[LAYERS];
        for (int l = 0; l < LAYERS; l++) {
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync(&act[l], 64 * MIB, s));
            CHECK(cudaMemsetAsync(act[l], 1, 64 * MIB, s));
            aoshim_try_layer_end(l);
        }
        for (int l = LAYERS - 1; l >= 0; l--) {
            aoshim_try_backward_begin(l);
            CHECK(cudaMemsetAsync(act[l], 2, 64 * MIB, s));
            aoshim_try_backward_end(l);
            CHECK(cudaFreeAsync(act[l], s));
        }
        // The optimizer.
        if (step == 0) {
            CHECK(cudaMallocAsync(&state, STATE, s));
            CHECK(cudaMemsetAsync(state, 0x5a, STATE, s));
            state_past = past_end(state, STATE);
        } else {
            void *t;
            CHECK(cudaMallocAsync(&t, STATE, s));
            CHECK(cudaMemsetAsync(t, 3, STATE, s));
            if (step == 1) temp_past = past_end(t, STATE);
            CHECK(cudaFreeAsync(t, s));
        }
        aoshim_try_step_end();
    }
    unsigned char b[2];
    CHECK(cudaMemcpyAsync(&b[0], state, 1, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(&b[1], (char *)state + STATE - 1, 1, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    printf("state_past_mib=%lu temp_past_mib=%lu ok=%d\n", state_past, temp_past,
           b[0] == 0x5a && b[1] == 0x5a);
    return 0;
}
