// SPDX-License-Identifier: MIT
// A write to a layer's buffer after the layer's end, through a parameter
// place that once held a leftover (a word no pointer can be: scan.h,
// leftover words), must not be lost. From the second step aoshim copies a
// layer's buffers out at the layer's end where the next layer did not use
// them (early copies, engine.c); a launch that writes one before the release
// point makes the buffer go again there. Here the kernel `put` (out = in + 1
// over n floats) is launched once per step with n = 0 and a small integer
// where `out` goes (its place is then a leftover place for `put`), and then,
// inside layer 1, with `out` = layer 0's buffer `a`. Layer 0 is offloaded
// (AOSHIM_OFFLOAD_LAYERS=1); its backward checks `a` against what `put`
// wrote. Prints one line per step, `step=<s> ok=<bytes>`, and last
// `offloaded=<bytes>`; exit 1 on a wrong byte.
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "aoshim.h"
#include "simgpu.h"

#define N     (1u << 20) // floats: 4 MiB, above AOSHIM_MIN_BYTES
#define STEPS 4

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        int e_ = (int)(x);                                                                         \
        if (e_) {                                                                                  \
            fprintf(stderr, "leftover_write: %s failed: %d\n", #x, e_);                            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void put(void) {}

static void put_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    const float *in = *(const float **)args[0];
    float *out = *(float **)args[1];
    unsigned n = *(unsigned *)args[2];
    for (unsigned i = 0; i < n; i++)
        out[i] = in[i] + 1.0f;
}

static cudaStream_t stream;

static void launch(const float *in, float *out, unsigned n)
{
    void *args[] = {&in, &out, &n};
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)put, one, one, args, 0, stream));
}

int main(void)
{
    sim_kernel_desc_t d = {.name = "put",
                           .fn = put_fn,
                           .nparams = 3,
                           .param_size = {8, 8, 4},
                           .naccess = 2,
                           .access = {{0, SIM_R, 2, 4}, {1, SIM_W, 2, 4}},
                           .ns_fixed = 2000,
                           .flops_param = -1};
    CHECK(simrtRegisterKernel((const void *)put, &d));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    aoshim_try_set_stream(stream);
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    if (!host || !back) return 1;
    int all = 1;
    for (int step = 0; step < STEPS; step++) {
        for (unsigned i = 0; i < N; i++)
            host[i] = (float)(i % 1000) + (float)step;
        float *a, *src, *t1, *t2;
        aoshim_try_layer_begin(0);
        CHECK(cudaMallocAsync((void **)&a, N * sizeof(float), stream));
        CHECK(cudaMemcpyAsync(a, host, N * sizeof(float), cudaMemcpyHostToDevice, stream));
        aoshim_try_layer_end(0);
        // Outside every layer: put's `out` place holds a small integer once.
        CHECK(cudaMalloc((void **)&src, N * sizeof(float)));
        CHECK(cudaMemcpyAsync(src, host, N * sizeof(float), cudaMemcpyHostToDevice, stream));
        launch(src, (float *)(uintptr_t)16, 0);
        aoshim_try_layer_begin(1);
        CHECK(cudaMallocAsync((void **)&t1, N * sizeof(float), stream));
        launch(src, a, N); // a = host + 1, after layer 0 ended
        aoshim_try_layer_end(1);
        aoshim_try_layer_begin(2);
        CHECK(cudaMallocAsync((void **)&t2, N * sizeof(float), stream));
        aoshim_try_layer_end(2);
        CHECK(cudaStreamSynchronize(stream));
        aoshim_try_backward_begin(2);
        CHECK(cudaFreeAsync(t2, stream));
        aoshim_try_backward_end(2);
        aoshim_try_backward_begin(1);
        CHECK(cudaFreeAsync(t1, stream));
        aoshim_try_backward_end(1);
        aoshim_try_backward_begin(0);
        CHECK(cudaMemcpyAsync(back, a, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        int ok = 1;
        for (unsigned i = 0; i < N && ok; i++)
            ok = back[i] == host[i] + 1.0f;
        CHECK(cudaFreeAsync(a, stream));
        aoshim_try_backward_end(0);
        aoshim_try_step_end();
        CHECK(cudaFree(src));
        printf("step=%d ok=%d\n", step, ok);
        all &= ok;
    }
    CHECK(cudaDeviceSynchronize());
    aoshim_stats_t st = {.size = sizeof st};
    (void)aoshim_try_get_stats(&st);
    printf("offloaded=%llu\n", (unsigned long long)st.offloaded_bytes);
    free(host);
    free(back);
    return all ? 0 : 1;
}
