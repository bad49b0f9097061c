// SPDX-License-Identifier: MIT
// Leftover words (src/offload/scan.h): a kernel whose parameters carry, at
// one place, words the kernel never reads (the host stack's leftovers, as
// PyTorch's OffsetCalculator does). Each step: layer 0 allocates and fills
// `a`, and a scratch buffer it frees; layers 1 and 2 run; layer 0 is then
// offloaded. The kernel `pick` (out = in + 1 over `in`, `out`, `n`; its
// fourth parameter `spare` is never read) is launched three times:
//   stale:    spare = the scratch buffer, freed (no live buffer there)
//   leftover: in resident, spare = `a` (offloaded)
//   pointer:  in = `a` (offloaded), spare = 0
// then, in a step of its own, `pick` with its `in` place learned (a size
// passed there once) reading a layer being reloaded, from another stream:
//   reloading races=<races the simulator saw> ok=<bytes>
// and a capture of `pick` with spare pointing at the freed scratch buffer.
// One line per launch: `<what> step=<s> late=<late reloads> ok=<bytes>`.
// Under AOSHIM_OFFLOAD_LAYERS=1, leftover: late=1 in the first step where
// `spare` has not yet been seen holding freed memory (that launch comes
// before the stale one), and late=0 from then on, since the place is known
// to hold leftovers; AOSHIM_SKIP_LEFTOVERS=0: late=1 in every step. pointer:
// late=1 always (a real pointer is never skipped), and the bytes are right.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "simgpu.h"

#define N (1u << 20) // floats: 4 MiB, above AOSHIM_MIN_BYTES

#define PROG "leftover_words"
#include "check.h"

static void pick(void) {}

static void pick_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    const float *in = *(const float **)args[0];
    float *out = *(float **)args[1];
    unsigned n = *(unsigned *)args[2];
    for (unsigned i = 0; i < n; i++)
        out[i] = in[i] + 1.0f;
}

static cudaStream_t stream;
static float *host, *out;

static uint64_t late(void)
{
    aoshim_stats_t st = {.size = sizeof st};
    return aoshim_try_get_stats(&st) == 0 ? st.late_reloads : 0;
}

static int verify(float want_base)
{
    static float back[N];
    CHECK(cudaMemcpy(back, out, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < N; i++)
        if (back[i] != (float)(i % 1000) + want_base + 1.0f) return 0;
    return 1;
}

static void launch(const char *what, int step, float *in, void *spare, float want_base)
{
    uint64_t before = late();
    unsigned n = N;
    void *args[] = {&in, &out, &n, &spare};
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)pick, one, one, args, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    printf("%s step=%d late=%llu ok=%d\n", what, step, (unsigned long long)(late() - before),
           verify(want_base));
    fflush(stdout);
}

// Layer 0 holds *a (host's values) and a buffer it freed (*freed: its
// address is a leftover now), layers 1 and 2 one buffer each (*t1, *t2),
// so that under 'all' layer 0 is offloaded; then the device is idle and a
// control call lets aoshim poll its releases.
static void three_layers(float **a, float **freed, float **t1, float **t2)
{
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync((void **)a, N * sizeof(float), stream));
    CHECK(cudaMemcpyAsync(*a, host, N * sizeof(float), cudaMemcpyHostToDevice, stream));
    CHECK(cudaMallocAsync((void **)freed, N * sizeof(float), stream));
    CHECK(cudaFreeAsync(*freed, stream));
    aoshim_try_layer_end(0);
    aoshim_try_layer_begin(1);
    CHECK(cudaMallocAsync((void **)t1, N * sizeof(float), stream));
    aoshim_try_layer_end(1);
    aoshim_try_layer_begin(2);
    CHECK(cudaMallocAsync((void **)t2, N * sizeof(float), stream));
    aoshim_try_layer_end(2);
    CHECK(cudaDeviceSynchronize());
    aoshim_try_set_microbatch(0);
}

int main(void)
{
    sim_kernel_desc_t d = {.name = "pick",
                           .fn = pick_fn,
                           .nparams = 4,
                           .param_size = {8, 8, 4, 8},
                           .naccess = 2,
                           .access = {{0, SIM_R, 2, 4}, {1, SIM_W, 2, 4}},
                           .ns_fixed = 2000,
                           .flops_param = -1};
    CHECK(simrtRegisterKernel((const void *)pick, &d));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    aoshim_try_set_stream(stream);
    host = malloc(N * sizeof(float));
    float *res; // resident: allocated outside layers
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    CHECK(cudaMalloc((void **)&res, N * sizeof(float)));
    for (int step = 0; step < 3; step++) {
        float *a, *scratch, *t1, *t2;
        for (unsigned i = 0; i < N; i++)
            host[i] = (float)(i % 1000) + (float)step;
        CHECK(cudaMemcpy(res, host, N * sizeof(float), cudaMemcpyHostToDevice));
        three_layers(&a, &scratch, &t1, &t2);
        CHECK(cudaFreeAsync(t1, stream));
        CHECK(cudaFreeAsync(t2, stream));
        launch("leftover", step, res, a, (float)step);
        launch("stale", step, res, scratch, (float)step);
        launch("pointer", step, a, NULL, (float)step);
        CHECK(cudaFreeAsync(a, stream));
        aoshim_try_step_end();
    }
    // A real pointer at a place learned as leftovers (the program passed a
    // size there once, with nothing to read): the layer it points
    // at is being reloaded for the compute stream, and a launch on another
    // stream still waits for that reload: it reads the bytes brought back,
    // ordered after their copy (the simulator counts a race otherwise).
    {
        float *a, *gone, *t1, *t2;
        cudaStream_t other;
        CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
        for (unsigned i = 0; i < N; i++)
            host[i] = (float)(i % 1000) + 7.0f;
        three_layers(&a, &gone, &t1, &t2); // layer 0 is offloaded
        unsigned zero = 0, n = N;
        void *none = NULL;
        float *junk = (float *)(uintptr_t)16; // no pointer can be 16: a leftover
        void *learn[] = {&junk, &out, &zero, &none};
        const dim3 one = {1, 1, 1};
        CHECK(cudaLaunchKernel((const void *)pick, one, one, learn, 0, stream));
        CHECK(cudaStreamSynchronize(stream));
        aoshim_try_backward_begin(2);
        aoshim_try_backward_end(2);
        aoshim_try_backward_begin(1); // layer 0 comes back, for `stream`
        sim_stats_t before = {0}, after = {0};
        CHECK(simrtGetStats(&before));
        void *args[] = {&a, &out, &n, &none};
        CHECK(cudaLaunchKernel((const void *)pick, one, one, args, 0, other));
        CHECK(cudaStreamSynchronize(other));
        CHECK(simrtGetStats(&after));
        printf("reloading races=%llu ok=%d\n", (unsigned long long)(after.races - before.races),
               verify(7.0f));
        aoshim_try_backward_end(1);
        aoshim_try_backward_begin(0);
        aoshim_try_backward_end(0);
        CHECK(cudaFreeAsync(a, stream));
        CHECK(cudaFreeAsync(t1, stream));
        CHECK(cudaFreeAsync(t2, stream));
        CHECK(cudaStreamSynchronize(stream));
        aoshim_try_step_end();
    }
    // A capture with a word at a place pointing where no chunk is: aoshim
    // has nothing to pin or wait for there.
    float *gone;
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync((void **)&gone, N * sizeof(float), stream));
    aoshim_try_layer_end(0);
    CHECK(cudaFreeAsync(gone, stream));
    CHECK(cudaStreamSynchronize(stream));
    aoshim_try_set_microbatch(0);
    cudaGraph_t g;
    cudaGraphExec_t x;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    unsigned n = N;
    void *args[] = {&res, &out, &n, &gone};
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)pick, one, one, args, 0, stream));
    CHECK(cudaStreamEndCapture(stream, &g));
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, stream));
    CHECK(cudaStreamSynchronize(stream));
    printf("capture ok=%d\n", verify(2.0f));
    return 0;
}
