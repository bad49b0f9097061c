// SPDX-License-Identifier: MIT
// bench_sim: the simulator's own real (wall-clock) overhead, so that figures
// measured through it (the shim's interception cost) can be read against it.
//
// Prints one key=value line each, medians in ns:
//   sim_launch_ns_nodata  cuLaunchKernel of a 16-pointer kernel, no-data mode
//   sim_launch_ns_data    the same with kernel bodies run (the body is empty)
//   sim_copy4k_async_ns   cuMemcpyDtoHAsync of 4 KiB into pinned memory
// Each mode runs in a forked child: the simulator reads SIM_NODATA at cuInit.
#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

#define NPTR    16
#define BATCH   64
#define BATCHES 4001

// --- helpers ------------------------------------------------------------------
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "bench_sim: %s failed: %d\n", what, (int)r);
        exit(1);
    }
}

static void empty_fn(void **args, const sim_launch_t *l)
{
    (void)args;
    (void)l;
}

// Median over BATCHES of the mean per-call time of BATCH calls: one call is
// too short for the clock, a batch mean still rejects scheduler noise.
static uint64_t median(uint64_t *v)
{
    qsort(v, BATCHES, sizeof *v, cmp_u64);
    return v[BATCHES / 2];
}

// --- one mode ----------------------------------------------------------------------
static void run(bool nodata)
{
    setenv("SIM_NODATA", nodata ? "1" : "0", 1);
    setenv("SIM_QUIET", "1", 1);
    check(cuInit(0), "cuInit");
    CUdevice dev;
    CUcontext ctx;
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");

    sim_kernel_desc_t d = {.name = "bench16",
                           .fn = empty_fn,
                           .nparams = NPTR,
                           .naccess = NPTR,
                           .ns_fixed = 1000,
                           .flops_param = -1};
    CUdeviceptr buf[NPTR];
    void *params[NPTR];
    for (int i = 0; i < NPTR; i++) {
        d.param_size[i] = 8;
        d.access[i] = (sim_access_t){
            .param = i, .mode = i & 1 ? SIM_R : SIM_W, .count_param = -1, .scale = 4096};
        check(cuMemAlloc_v2(&buf[i], 4096), "cuMemAlloc");
        params[i] = &buf[i];
    }
    CUfunction f;
    check(simKernelCreate(&d, &f), "simKernelCreate");
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

    static uint64_t t[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < BATCH; i++)
            check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, NULL), "cuLaunchKernel");
        t[b] = (now_ns() - t0) / BATCH;
    }
    printf("sim_launch_ns_%s=%llu\n", nodata ? "nodata" : "data", (unsigned long long)median(t));

    if (!nodata) {
        void *h;
        check(cuMemAllocHost_v2(&h, 4096), "cuMemAllocHost");
        for (int b = 0; b < BATCHES; b++) {
            uint64_t t0 = now_ns();
            for (int i = 0; i < BATCH; i++)
                check(cuMemcpyDtoHAsync_v2(h, buf[0], 4096, s), "cuMemcpyDtoHAsync");
            t[b] = (now_ns() - t0) / BATCH;
        }
        printf("sim_copy4k_async_ns=%llu\n", (unsigned long long)median(t));
    }
    fflush(stdout);
}

int main(void)
{
    for (int mode = 0; mode < 2; mode++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            run(mode == 0);
            _exit(0);
        }
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
    }
    return 0;
}
