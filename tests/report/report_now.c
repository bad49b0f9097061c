// SPDX-License-Identifier: MIT
// A program that uses the GPU and asks for the report in the middle of its
// run (aoshim_report_now), then exits (the report again, at exit). Prints
// "report_now rc=<code>" (AOSHIM_ENOTLOADED without the shim).
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "aoshim.h"

int main(void)
{
    void *p = NULL;
    aoshim_try_layer_begin(0);
    if (cudaMalloc(&p, 4 << 20) != cudaSuccess) return 1;
    aoshim_try_layer_end(0);
    int rc = aoshim_report_now ? aoshim_report_now() : AOSHIM_ENOTLOADED;
    printf("report_now rc=%d\n", rc);
    cudaFree(p);
    return 0;
}
