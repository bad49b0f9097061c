// SPDX-License-Identifier: MIT
// A program that uses the GPU, then forks a child that exits normally (its
// destructors run, as a data-loader worker's do): only the parent may write
// the report. Prints "fork_child ok" from the parent when both exited 0.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aoshim.h"

int main(void)
{
    void *p = NULL, *q = NULL;
    aoshim_try_layer_begin(0);
    if (cudaMalloc(&p, 4 << 20) != cudaSuccess) return 1;
    aoshim_try_layer_end(0);
    if (cudaMalloc(&q, 1 << 20) != cudaSuccess) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) return 0; // the child: exit() runs every destructor
    int st = 0;
    waitpid(pid, &st, 0);
    cudaFree(q);
    cudaFree(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
    printf("fork_child ok parent=%d child=%d\n", (int)getpid(), (int)pid);
    return 0;
}
