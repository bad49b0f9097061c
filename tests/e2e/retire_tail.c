// SPDX-License-Identifier: MIT
// A buffer allocated where a retiring chunk has room: layer 0 allocates 3
// MiB (a chunk of 4 MiB), keeps the GPU busy writing it, frees it (its
// chunk retires: released once that copy is done), then allocates 512 KiB
// and writes it; layer 1 then gets memory as the first chunk's release
// comes. Prints `wrong=<bytes of the 512 KiB read back wrong>`: 0 unless
// the new buffer was placed in the retiring chunk and went with it (it was,
// before the fix in alloc.c's suballoc: 522,240 wrong bytes).
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "aoshim.h"

#define PROG "retire_tail"
#include "check.h"

#define SMALL (1u << 19)

int main(void)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    static char host[SMALL], back[SMALL];
    for (unsigned i = 0; i < SMALL; i++) host[i] = (char)(i * 7 + 1);
    char *big;
    CHECK(cudaMallocHost((void **)&big, 3u << 20)); // pinned: the copy runs on its own
    void *a, *b, *c;
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync(&a, 3u << 20, s));
    CHECK(cudaMemcpyAsync(a, big, 3u << 20, cudaMemcpyHostToDevice, s));
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaMallocAsync(&b, SMALL, s));
    CHECK(cudaMemcpyAsync(b, host, SMALL, cudaMemcpyHostToDevice, s));
    aoshim_try_layer_end(0);
    CHECK(cudaStreamSynchronize(s));
    aoshim_try_set_microbatch(0); // a control call: aoshim polls its releases
    aoshim_try_layer_begin(1);
    CHECK(cudaMallocAsync(&c, 4u << 20, s));
    CHECK(cudaMemsetAsync(c, 0, 4u << 20, s));
    aoshim_try_layer_end(1);
    CHECK(cudaMemcpyAsync(back, b, SMALL, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    unsigned wrong = 0;
    for (unsigned i = 0; i < SMALL; i++)
        wrong += back[i] != host[i];
    printf("wrong=%u\n", wrong);
    return 0;
}
