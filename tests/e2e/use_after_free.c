// SPDX-License-Identifier: MIT
// A use after free of a buffer allocated inside a layer: the kernel reads
// memory the program already freed. Without aoshim the simulated GPU faults
// (exit 86); under aoshim the freed buffer's chunk may stay mapped (hiding
// the bug) unless AOSHIM_CHECK=1, which unmaps it at once.
#define PROG "use_after_free"
#include <cuda_runtime_api.h>

#include "aoshim.h"
#include "plus_one.h"

#define N (1u << 20) // floats: 4 MiB, tracked

int main(void)
{
    plus_one_register(1000);
    float *keep = NULL, *gone = NULL, *out = NULL;
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync((void **)&keep, N * sizeof(float), 0)); // a live neighbour
    CHECK(cudaMallocAsync((void **)&gone, N * sizeof(float), 0));
    CHECK(cudaMemsetAsync(gone, 0, N * sizeof(float), 0));
    CHECK(cudaFreeAsync(gone, 0));
    unsigned n = N;
    void *args[] = {&gone, &out, &n};
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, 0)); // the bug
    CHECK(cudaStreamSynchronize(0));
    aoshim_try_layer_end(0);
    printf("use_after_free: not caught\n");
    return 0;
}
