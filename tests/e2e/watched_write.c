// SPDX-License-Identifier: MIT
// A write to a layer's buffer after the layer's end must not be lost. From
// the second step aoshim copies a layer's buffers out at the layer's end
// where the next layer did not use them (early copies, engine.c); the
// layer's chunks are watched until the release point, and a launch that
// writes such a buffer there makes it go again. Layer 0 makes a and b;
// inside layer 1 a kernel writes one of them; layer 0 is offloaded
// (AOSHIM_OFFLOAD_LAYERS=1) and its backward checks the bytes.
//   watched_write       through a leftover place (scan.h, leftover words):
//                       the kernel `plus_one` (out = in + 1 over n floats) is
//                       launched once per step with n = 0 and a small integer
//                       where `out` goes (its place is then a leftover place
//                       for `plus_one`), then with `out` = a;
//   watched_write wide  through a launch's 17th word into the chunk, past
//                       the words the scan keeps per launch: `wide` takes a
//                       sixteen times and writes b = a + 1.
//   watched_write alternate  layer 1 writes a in even steps and b in odd
//                       ones (8 steps): each step the buffer last step left
//                       alone is the one written (the H200 Llama's step, a
//                       word landing in one of two buffers of a layer by
//                       turns).
//   watched_write rotate  layer 0 makes four buffers, and layer 1 writes
//                       buffer step % 4 (8 steps): a use the steps before
//                       did not show, every step up to the fifth (the
//                       word the H200 Llama's step lands with, in a
//                       different buffer of a layer each step).
// Prints one line per step, `step=<s> ok=<0|1>`, and last
// `offloaded=<bytes>`; exit 1 on a wrong byte.
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "watched_write"
#include "aoshim.h"
#include "plus_one.h"

#define N     (1u << 20) // floats: 4 MiB, above AOSHIM_MIN_BYTES
#define STEPS 4
#define STEPS_ALTERNATE 8
#define NBUF            4 // layer 0's buffers in `rotate` (two otherwise)

#define WIDE 16 // a's words in `wide`: AO_SCAN_WATCHED_WORDS

static void wide(void) {}

static void wide_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    const float *in = *(const float **)args[0];
    float *out = *(float **)args[WIDE];
    unsigned n = *(unsigned *)args[WIDE + 1];
    for (unsigned i = 0; i < n; i++)
        out[i] = in[i] + 1.0f;
}

static cudaStream_t stream;

static void launch(const float *in, float *out, unsigned n)
{
    void *args[] = {&in, &out, &n};
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, stream));
}

static void launch_wide(const float *in, float *out, unsigned n)
{
    void *args[WIDE + 2];
    for (int i = 0; i < WIDE; i++)
        args[i] = &in;
    args[WIDE] = &out;
    args[WIDE + 1] = &n;
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)wide, one, one, args, 0, stream));
}

int main(int argc, char **argv)
{
    const bool through_wide = argc > 1 && !strcmp(argv[1], "wide");
    const bool alternate = argc > 1 && !strcmp(argv[1], "alternate");
    const bool rotate = argc > 1 && !strcmp(argv[1], "rotate");
    const int steps = alternate || rotate ? STEPS_ALTERNATE : STEPS;
    const int nbuf = rotate ? NBUF : 2;
    plus_one_register(2000);
    sim_kernel_desc_t w = {.name = "wide",
                           .fn = wide_fn,
                           .nparams = WIDE + 2,
                           .naccess = 2,
                           .access = {{0, SIM_R, WIDE + 1, 4}, {WIDE, SIM_W, WIDE + 1, 4}},
                           .ns_fixed = 2000,
                           .flops_param = -1};
    for (int i = 0; i < WIDE + 1; i++)
        w.param_size[i] = 8;
    w.param_size[WIDE + 1] = 4;
    CHECK(simrtRegisterKernel((const void *)wide, &w));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    aoshim_try_set_stream(stream);
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    if (!host || !back) return 1;
    int all = 1;
    for (int step = 0; step < steps; step++) {
        for (unsigned i = 0; i < N; i++)
            host[i] = (float)(i % 1000) + (float)step;
        float *buf[NBUF], *src, *t1, *t2;
        aoshim_try_layer_begin(0);
        for (int k = 0; k < nbuf; k++) {
            CHECK(cudaMallocAsync((void **)&buf[k], N * sizeof(float), stream));
            CHECK(cudaMemcpyAsync(buf[k], host, N * sizeof(float), cudaMemcpyHostToDevice, stream));
        }
        aoshim_try_layer_end(0);
        float *a = buf[0], *b = buf[1];
        float *out = through_wide || (alternate && step % 2) ? b : a; // layer 1 writes host + 1
        if (rotate) out = buf[step % NBUF];
        // Outside every layer: plus_one's `out` place holds a small integer once.
        CHECK(cudaMalloc((void **)&src, N * sizeof(float)));
        CHECK(cudaMemcpyAsync(src, host, N * sizeof(float), cudaMemcpyHostToDevice, stream));
        launch(src, (float *)(uintptr_t)16, 0);
        aoshim_try_layer_begin(1);
        CHECK(cudaMallocAsync((void **)&t1, N * sizeof(float), stream));
        if (through_wide)
            launch_wide(a, b, N); // b = a + 1, after layer 0 ended
        else
            launch(src, out, N); // out = host + 1, after layer 0 ended
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
        CHECK(cudaMemcpyAsync(back, out, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        int ok = 1;
        for (unsigned i = 0; i < N && ok; i++)
            ok = back[i] == host[i] + 1.0f;
        for (int k = 0; k < nbuf; k++)
            CHECK(cudaFreeAsync(buf[k], stream));
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
