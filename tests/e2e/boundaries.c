// SPDX-License-Identifier: MIT
// A training-shaped sequence of layer boundaries: steps of M microbatches of
// L layers forward, then backward on a second thread (as PyTorch's autograd
// thread runs it), layer 1 recomputed inside its backward (activation
// checkpointing). Built twice (tests/e2e/meson.build):
//
//   boundaries      no CUDA at all: the boundaries only, as a CPU-only
//                   program under the shim makes them
//   boundaries_gpu  (BOUNDARIES_GPU) each layer's forward allocates its
//                   output and computes it from the previous one; backward
//                   reads every output back and checks it, byte for byte
//
// Prints "call <name> <arg> rc=<code>" per control call, "check <k>=<v>" for
// what tests/e2e/test_boundaries.c asserts, "pid <n>" first.
//
//   --small all|last|none  (gpu) outputs under AOSHIM_MIN_BYTES in every
//                          layer, in the last one only, or in none (none)
//   --misuse               two refused calls first (layer_end(7), set_microbatch(-1))
//   --fork                 at the end, a forked child makes one call (step_end)
//   --no-boundaries        the same work without a single control call
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aoshim.h"

#define LAYERS 4
#define MBS    2
#define STEPS  2
#define CKPT   1 // the layer recomputed in backward

#ifdef BOUNDARIES_GPU
#define PROG "boundaries_gpu"
#include <cuda_runtime_api.h>

#include "plus_one.h"

#define BIG   (2u << 20)   // above AOSHIM_MIN_BYTES (1 MiB): tracked
#define SMALL (256u << 10) // below it: never tracked

static size_t size_of[LAYERS];
static float *act[MBS][LAYERS], *re[MBS];
static float *host;
static bool bytes_ok = true;
static double sum;

// Layer l's output element i in microbatch mb: exact in a float.
static float want(int mb, int l, size_t i)
{
    return (float)(mb * 1000 + (int)(i % 97) + l);
}

static void *dev_alloc(size_t n)
{
    void *p = NULL;
    CHECK(cudaMallocAsync(&p, n, 0));
    return p;
}

// out = plus_one(in) over out's elements (every layer's output is no larger
// than its input's).
static void compute(int mb, int l, float *out)
{
    size_t n = size_of[l] / sizeof(float);
    if (l == 0) {
        for (size_t i = 0; i < n; i++)
            host[i] = want(mb, 0, i);
        CHECK(cudaMemcpyAsync(out, host, size_of[0], cudaMemcpyHostToDevice, 0));
        CHECK(cudaStreamSynchronize(0)); // the host buffer is reused
        return;
    }
    const float *in = act[mb][l - 1];
    unsigned un = (unsigned)n;
    void *args[] = {&in, &out, &un};
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, 0));
}

static void check(int mb, int l, const float *p)
{
    size_t n = size_of[l] / sizeof(float);
    CHECK(cudaMemcpyAsync(host, p, size_of[l], cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
    for (size_t i = 0; i < n; i++) {
        if (host[i] != want(mb, l, i)) bytes_ok = false;
        sum += host[i];
    }
}

static void fwd(int mb, int l)
{
    act[mb][l] = dev_alloc(size_of[l]);
    compute(mb, l, act[mb][l]);
}
static void recompute(int mb, int l)
{
    re[mb] = dev_alloc(size_of[l]);
    compute(mb, l, re[mb]);
}
static void bwd(int mb, int l)
{
    check(mb, l, act[mb][l]);
    if (l == CKPT) {
        check(mb, l, re[mb]);
        CHECK(cudaFreeAsync(re[mb], 0));
    }
    CHECK(cudaFreeAsync(act[mb][l], 0));
}
#else
#define PROG "boundaries"
static void fwd(int mb, int l)
{
    (void)mb, (void)l;
}
static void recompute(int mb, int l)
{
    (void)mb, (void)l;
}
static void bwd(int mb, int l)
{
    (void)mb, (void)l;
}
#endif

static bool no_boundaries;

static void call_(const char *name, int arg, int rc)
{
    printf("call %s %d rc=%d\n", name, arg, rc);
}
// The control call itself is skipped under --no-boundaries.
#define call(name, arg, expr)                                                                      \
    do {                                                                                           \
        if (!no_boundaries) call_(name, arg, expr);                                                \
    } while (0)

static void *backward(void *unused)
{
    (void)unused;
    for (int mb = MBS - 1; mb >= 0; mb--) {
        call("set_microbatch", mb, aoshim_try_set_microbatch(mb));
        for (int l = LAYERS - 1; l >= 0; l--) {
            call("backward_begin", l, aoshim_try_backward_begin(l));
            if (l == CKPT) {
                call("layer_begin", l, aoshim_try_layer_begin(l));
                recompute(mb, l);
                call("layer_end", l, aoshim_try_layer_end(l));
            }
            bwd(mb, l);
            call("backward_end", l, aoshim_try_backward_end(l));
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *small = "none";
    bool misuse = false, do_fork = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small") && i + 1 < argc)
            small = argv[++i];
        else if (!strcmp(argv[i], "--misuse"))
            misuse = true;
        else if (!strcmp(argv[i], "--fork"))
            do_fork = true;
        else if (!strcmp(argv[i], "--no-boundaries"))
            no_boundaries = true;
        else {
            fprintf(stderr, PROG ": unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    printf("pid %d\n", (int)getpid());
#ifdef BOUNDARIES_GPU
    for (int l = 0; l < LAYERS; l++)
        size_of[l] =
            !strcmp(small, "all") || (!strcmp(small, "last") && l == LAYERS - 1) ? SMALL : BIG;
    host = malloc(BIG);
    if (!host) return 1;
    plus_one_register(1000);
#else
    (void)small;
#endif
    if (misuse) {
        call("layer_end", 7, aoshim_try_layer_end(7));
        call("set_microbatch", -1, aoshim_try_set_microbatch(-1));
    }
    // The first CUDA call (gpu) is the allocation inside layer 0: the
    // boundary before it comes first.
    for (int step = 0; step < STEPS; step++) {
        for (int mb = 0; mb < MBS; mb++) {
            call("set_microbatch", mb, aoshim_try_set_microbatch(mb));
            for (int l = 0; l < LAYERS; l++) {
                call("layer_begin", l, aoshim_try_layer_begin(l));
                fwd(mb, l);
                call("layer_end", l, aoshim_try_layer_end(l));
            }
        }
        fflush(stdout);
        pthread_t t;
        if (pthread_create(&t, NULL, backward, NULL) != 0) return 1;
        pthread_join(t, NULL);
        call("step_end", -1, aoshim_try_step_end());
    }
#ifdef BOUNDARIES_GPU
    CHECK(cudaDeviceSynchronize());
    aoshim_stats_t st = {.size = sizeof st};
    aoshim_try_get_stats(&st);
    printf("check bytes_ok=%d\n", bytes_ok);
    printf("check sum=%.1f\n", sum);
    printf("check offloaded=%llu\n", (unsigned long long)st.offloaded_bytes);
    printf("check reloaded=%llu\n", (unsigned long long)st.reloaded_bytes);
    free(host);
#else
    // Whether anything in this process loaded the CUDA driver: this program
    // never does, so only the shim could have.
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    printf("check driver_loaded=%d\n", drv != NULL);
#endif
    if (do_fork) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            aoshim_try_step_end();
            exit(0); // destructors run, as a data-loader worker's do
        }
        int wst = 0;
        waitpid(pid, &wst, 0);
        if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) return 1;
        printf("child %d\n", (int)pid);
    }
    printf("done\n");
    return 0;
}
