// SPDX-License-Identifier: MIT
// A CUDA graph captured over a tracked buffer: while the graph lives, the
// buffer is never offloaded (a replay cannot wait for a reload aoshim would
// issue outside it), and every replay reads the right bytes. Prints
//   graph ok=<0|1> offloaded=<bytes> kept=<buffers kept resident>
// Run with AOSHIM_OFFLOAD_LAYERS=1 (layer 0 would be offloaded otherwise).
// With GRAPH_PIN_NO_CAPTURE=1 the kernel is launched directly instead of
// captured: then layer 0 is offloaded, which shows what the graph prevents.
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "aoshim.h"
#include "simgpu.h"

#define N (1u << 20)
#define PROG "graph_pin"
#include "plus_one.h"

int main(void)
{
    plus_one_register(2000);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float)), *in, *out, *t;
    for (unsigned i = 0; i < N; i++) host[i] = (float)(i % 977);
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    int ok = 1;
    for (int step = 0; step < 2; step++) {
        aoshim_try_layer_begin(0);
        CHECK(cudaMallocAsync((void **)&in, N * sizeof(float), s));
        CHECK(cudaMemcpyAsync(in, host, N * sizeof(float), cudaMemcpyHostToDevice, s));
        // Capture a kernel over layer 0's buffer.
        cudaGraph_t g;
        cudaGraphExec_t x;
        unsigned n = N;
        void *args[] = {&in, &out, &n};
        const dim3 one = {1, 1, 1};
        bool capture = !getenv("GRAPH_PIN_NO_CAPTURE");
        if (capture) {
            CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
            CHECK(cudaStreamEndCapture(s, &g));
            CHECK(cudaGraphInstantiate(&x, g, 0));
        }
        aoshim_try_layer_end(0);
        for (int l = 1; l <= 2; l++) { // layer 0 would be offloaded by now
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync((void **)&t, N * sizeof(float), s));
            aoshim_try_layer_end(l);
            CHECK(cudaFreeAsync(t, s));
        }
        CHECK(cudaDeviceSynchronize());
        aoshim_try_set_microbatch(0); // a boundary: aoshim acts on what completed
        for (int replay = 0; replay < 2; replay++) {
            if (capture) CHECK(cudaGraphLaunch(x, s));
            else CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
            CHECK(cudaStreamSynchronize(s));
            CHECK(cudaMemcpy(back, out, N * sizeof(float), cudaMemcpyDeviceToHost));
            for (unsigned i = 0; i < N; i++)
                if (back[i] != host[i] + 1.0f) ok = 0;
        }
        if (capture) {
            CHECK(cudaGraphExecDestroy(x));
            CHECK(cudaGraphDestroy(g));
        }
        CHECK(cudaFreeAsync(in, s));
        aoshim_try_step_end();
    }
    aoshim_stats_t st = {.size = sizeof st};
    aoshim_try_get_stats(&st);
    printf("graph ok=%d offloaded=%llu kept=%llu\n", ok, (unsigned long long)st.offloaded_bytes,
           (unsigned long long)st.kept_resident);
    CHECK(cudaStreamSynchronize(s));
    return 0;
}
