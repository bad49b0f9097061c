// SPDX-License-Identifier: MIT
// Stands in for test_nvcc.c when meson finds no nvcc, or in a sanitizer
// build (an uninstrumented program cannot load an ASan runtime): one line,
// and meson's skip status.
#include <stdio.h>

int main(void)
{
    printf("sim_nvcc: skipped: needs nvcc (CUDA toolkit) and a build without sanitizers\n");
    return 77;
}
