// SPDX-License-Identifier: MIT
// The program's own allocations served from aoshim's memory (AOSHIM_SERVE=1,
// offload/serve.c), against the simulator's race checker (run with
// SIM_RACE_FATAL=1): a buffer freed on its own stream is reused by the next
// allocation of its size on that stream, in stream order (same address),
// while the work before the free still reads it; one freed from another
// stream, or by cudaFree, is not reused before that stream's work is done;
// aoshim_keep on a served buffer is a no-op. Prints `same_addr=<0|1>
// read_ok=<0|1> cross_ok=<0|1> keep=<rc>`.
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

#define SIZE (4u << 20)

int main(void)
{
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    aoshim_try_set_stream(s1);
    char *pat, *back, *back2;
    CHECK(cudaMallocHost((void **)&pat, SIZE));
    CHECK(cudaMallocHost((void **)&back, SIZE));
    CHECK(cudaMallocHost((void **)&back2, SIZE));
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
    CHECK(cudaDeviceSynchronize());
    int keep = aoshim_try_keep(f);
    CHECK(cudaFree(f)); // a served buffer freed by cudaFree
    CHECK(cudaFreeAsync(d, s1));
    CHECK(cudaFreeAsync(act, s1));
    CHECK(cudaStreamSynchronize(s1));
    printf("same_addr=%d read_ok=%d cross_ok=%d keep=%d\n", same, memcmp(back, pat, SIZE) == 0,
           memcmp(back2, pat, SIZE) == 0, keep);
    return 0;
}
