// SPDX-License-Identifier: MIT
// Misuses of the control API, then one correct offload/reload round trip.
// Prints "call <name> rc=<code>" for every control call and "check <name>=<v>"
// for the facts the test asserts; tests/e2e/test_control.c reads them. Runs
// with or without LD_PRELOAD=libaoshim.so: without it, every call must answer
// AOSHIM_ENOTLOADED and the round trip must still hold its bytes.
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "simgpu.h"

#define BUF_BYTES (2u << 20) // above AOSHIM_MIN_BYTES (1 MiB): tracked

static void call(const char *name, int rc)
{
    printf("call %s rc=%d\n", name, rc);
    fflush(stdout);
}

static void *end_layer_1(void *unused)
{
    (void)unused;
    call("layer_end_other_thread", aoshim_try_layer_end(1));
    return NULL;
}

static void ck(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        printf("cuda %s failed: %d\n", what, (int)e);
        exit(1);
    }
}

int main(void)
{
    // --- misuse before any CUDA call: the shim must not need a context yet ---
    int host_local = 42;
    // Each misuse twice: its warning may be printed at most once.
    for (int rep = 0; rep < 2; rep++) {
        call("layer_end_without_begin", aoshim_try_layer_end(3));
        call("backward_begin_never_run", aoshim_try_backward_begin(7));
        call("backward_end_without_begin", aoshim_try_backward_end(2));
        call("layer_begin_negative", aoshim_try_layer_begin(-1));
        call("backward_begin_negative", aoshim_try_backward_begin(-1));
        call("set_microbatch_negative", aoshim_try_set_microbatch(-1));
        call("keep_null", aoshim_try_keep(NULL));
        call("keep_host_pointer", aoshim_try_keep(&host_local));
    }

    // --- CUDA from here ---
    cudaStream_t s;
    ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    call("set_stream", aoshim_try_set_stream(s));
    void *outside = NULL;
    ck(cudaMallocAsync(&outside, BUF_BYTES, s), "cudaMallocAsync(outside)");
    // Memory allocated outside any layer is never offloaded: keeping it is
    // harmless and succeeds.
    call("keep_passthrough", aoshim_try_keep(outside));

    unsigned char *pattern = malloc(BUF_BYTES), *back = malloc(BUF_BYTES);
    if (!pattern || !back) return 1;
    for (size_t i = 0; i < BUF_BYTES; i++)
        pattern[i] = (unsigned char)(i * 131u + (i >> 11) + 7u);

    // Forward: layer 0 saves A, layer 1 saves B.
    call("set_microbatch", aoshim_try_set_microbatch(0));
    call("layer_begin_0", aoshim_try_layer_begin(0));
    void *a = NULL, *b = NULL;
    ck(cudaMallocAsync(&a, BUF_BYTES, s), "cudaMallocAsync(a)");
    ck(cudaMemcpyAsync(a, pattern, BUF_BYTES, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync(a)");
    for (int rep = 0; rep < 2; rep++)
        call("layer_begin_0_nested", aoshim_try_layer_begin(0));
    call("layer_end_0", aoshim_try_layer_end(0));
    call("layer_begin_1", aoshim_try_layer_begin(1));
    ck(cudaMallocAsync(&b, BUF_BYTES, s), "cudaMallocAsync(b)");
    // Misuse inside a layer is refused and changes nothing: the layer stays
    // open, offloading goes on (the round trip below proves it).
    for (int rep = 0; rep < 2; rep++) {
        call("backward_begin_inside_layer", aoshim_try_backward_begin(0));
        call("step_end_inside_layer", aoshim_try_step_end());
        call("set_stream_garbage", aoshim_try_set_stream((void *)(uintptr_t)0xdeadbeef0ull));
        pthread_t t; // a layer belongs to the thread that began it
        pthread_create(&t, NULL, end_layer_1, NULL);
        pthread_join(t, NULL);
    }
    ck(cudaMemsetAsync(b, 0x5a, BUF_BYTES, s), "cudaMemsetAsync(b)");
    call("layer_end_1", aoshim_try_layer_end(1));
    // A third layer: in the first step (the layer count not yet known) a
    // layer's copy out starts once the forward is seen to go on.
    call("layer_begin_2", aoshim_try_layer_begin(2));
    call("layer_end_2", aoshim_try_layer_end(2));
    // Everything queued (aoshim's copies too) completes: layer 0 can be
    // released by the next control call.
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    aoshim_stats_t st = {.size = sizeof st};
    call("get_stats_forward", aoshim_try_get_stats(&st));
    printf("check offloaded_after_forward=%llu\n", (unsigned long long)st.offloaded_bytes);

    // Backward: 2, 1, then 0, which reads A back.
    call("backward_begin_2", aoshim_try_backward_begin(2));
    call("backward_end_2", aoshim_try_backward_end(2));
    call("backward_begin_1", aoshim_try_backward_begin(1));
    call("backward_end_1", aoshim_try_backward_end(1));
    call("backward_begin_0", aoshim_try_backward_begin(0));
    memset(back, 0, BUF_BYTES);
    ck(cudaMemcpyAsync(back, a, BUF_BYTES, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(back)");
    ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    printf("check bytes_intact=%d\n", memcmp(back, pattern, BUF_BYTES) == 0);
    // The simulator's own count: A's device memory really was unmapped (and
    // mapped again) on the way, so intact bytes mean a real round trip.
    sim_stats_t ss;
    memset(&ss, 0, sizeof ss);
    simrtGetStats(&ss);
    printf("check sim_unmap_calls=%llu\n", (unsigned long long)ss.unmap_calls);
    call("backward_end_0", aoshim_try_backward_end(0));
    ck(cudaFreeAsync(a, s), "cudaFreeAsync(a)");
    ck(cudaFreeAsync(b, s), "cudaFreeAsync(b)");
    ck(cudaFreeAsync(outside, s), "cudaFreeAsync(outside)");
    call("step_end", aoshim_try_step_end());
    ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    call("get_stats_end", aoshim_try_get_stats(&st));
    printf("check offloaded_bytes=%llu\n", (unsigned long long)st.offloaded_bytes);
    printf("check reloaded_bytes=%llu\n", (unsigned long long)st.reloaded_bytes);
    ck(cudaStreamDestroy(s), "cudaStreamDestroy");
    free(pattern);
    free(back);
    printf("done\n");
    return 0;
}
