// SPDX-License-Identifier: MIT
// The program's own allocations served from aoshim's memory (AOSHIM_SERVE=1,
// offload/serve.c), against the simulator's race checker (run with
// SIM_RACE_FATAL=1): a buffer freed on its own stream is reused by the next
// allocation of its size on that stream, in stream order (same address),
// while the work before the free still reads it; one freed from another
// stream, or by cudaFree, is not reused before that stream's work is done;
// aoshim_keep on a served buffer is a no-op; the same within a slab of
// small ones. Prints `same_addr=<0|1> read_ok=<0|1> cross_ok=<0|1>
// slab=<0|1> slab_read_ok=<0|1> keep=<rc>`.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        int e_ = (int)(x);                                                                         \
        if (e_) {                                                                                  \
            fprintf(stderr, "served_reuse: %s failed: %d\n", #x, e_);                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define SIZE (8u << 20)  // a chunk of its own
#define SMALL (2u << 20) // in a slab

int main(void)
{
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    aoshim_try_set_stream(s1);
    char *pat, *back, *back2, *back3, *back4;
    CHECK(cudaMallocHost((void **)&pat, SIZE));
    CHECK(cudaMallocHost((void **)&back, SIZE));
    CHECK(cudaMallocHost((void **)&back2, SIZE));
    CHECK(cudaMallocHost((void **)&back3, SMALL));
    CHECK(cudaMallocHost((void **)&back4, SMALL));
    for (unsigned i = 0; i < SIZE; i++) pat[i] = (char)(i * 13 + 5);
    // A layer, so that aoshim tracks and offloads (serving is on only then).
    void *act;
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync(&act, SIZE, s1));
    CHECK(cudaMemsetAsync(act, 1, SIZE, s1));
    aoshim_try_layer_end(0);

    // Same stream: written, read back, freed, allocated again at once.
    void *c, *d;
    CHECK(cudaMallocAsync(&c, SIZE, s1));
    CHECK(cudaMemcpyAsync(c, pat, SIZE, cudaMemcpyHostToDevice, s1));
    CHECK(cudaMemcpyAsync(back, c, SIZE, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(c, s1));
    CHECK(cudaMallocAsync(&d, SIZE, s1));
    CHECK(cudaMemsetAsync(d, 0x5a, SIZE, s1));
    int same = c == d;

    // Another stream: allocated on s1, read on s2, freed on s2; then a new
    // allocation on s1 written at once: not the memory s2 still reads.
    void *e, *f;
    cudaEvent_t ready;
    CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CHECK(cudaMallocAsync(&e, SIZE, s1));
    CHECK(cudaMemcpyAsync(e, pat, SIZE, cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(ready, s1));
    CHECK(cudaStreamWaitEvent(s2, ready, 0));
    CHECK(cudaMemcpyAsync(back2, e, SIZE, cudaMemcpyDeviceToHost, s2));
    CHECK(cudaFreeAsync(e, s2));
    CHECK(cudaMallocAsync(&f, SIZE, s1));
    CHECK(cudaMemsetAsync(f, 0x33, SIZE, s1));
    // A slab (up to 4 MiB, serve.c): g stays live beside h; h, read back
    // and freed on s1, is reused at once by the next of its size on s1 (its
    // space in the slab), after the read in stream order; i, read on s2
    // and freed there, keeps its space until the slab empties.
    void *g, *h, *h2, *i, *j;
    CHECK(cudaMallocAsync(&g, SMALL, s1));
    CHECK(cudaMallocAsync(&h, SMALL, s1));
    CHECK(cudaMemcpyAsync(h, pat, SMALL, cudaMemcpyHostToDevice, s1));
    CHECK(cudaMemcpyAsync(back3, h, SMALL, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(h, s1));
    CHECK(cudaMallocAsync(&h2, SMALL, s1));
    CHECK(cudaMemsetAsync(h2, 0x11, SMALL, s1));
    CHECK(cudaMallocAsync(&i, SMALL, s1));
    CHECK(cudaMemcpyAsync(i, pat, SMALL, cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(ready, s1));
    CHECK(cudaStreamWaitEvent(s2, ready, 0));
    CHECK(cudaMemcpyAsync(back4, i, SMALL, cudaMemcpyDeviceToHost, s2));
    CHECK(cudaFreeAsync(i, s2));
    CHECK(cudaMallocAsync(&j, SMALL, s1));
    CHECK(cudaMemsetAsync(j, 0x22, SMALL, s1));
    int slab_same = h == h2 && i != j;
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFreeAsync(g, s1));
    CHECK(cudaFreeAsync(h2, s1));
    CHECK(cudaFreeAsync(j, s1));
    int keep = aoshim_try_keep(f);
    CHECK(cudaFree(f)); // a served buffer freed by cudaFree
    CHECK(cudaFreeAsync(d, s1));
    CHECK(cudaFreeAsync(act, s1));
    CHECK(cudaStreamSynchronize(s1));
    printf("same_addr=%d read_ok=%d cross_ok=%d slab=%d slab_read_ok=%d keep=%d\n", same,
           memcmp(back, pat, SIZE) == 0, memcmp(back2, pat, SIZE) == 0, slab_same,
           memcmp(back3, pat, SMALL) == 0 && memcmp(back4, pat, SMALL) == 0, keep);
    return 0;
}
