// SPDX-License-Identifier: MIT
// The manual schedule (aoshim_set_schedule(AOSHIM_SCHEDULE_MANUAL)): layers
// move when the program says so, and not before. Run under the shim on the
// simulated GPU:
//
//   manual       two steps of six layers, each layer's output computed from
//                the previous one's; layers 0-3 named for offload, 4-5 never.
//
// Checked between the calls, from aoshim's counters and the simulator's:
// - offload_layer(L) right after layer_end(L) copies nothing yet (the next
//   layer still reads L's output); the copy is issued once layer L+1 ends,
//   or at once when the program names L after that point;
// - after release_layer(L) returns, L's bytes are offloaded (the host waited);
// - a layer never named is never copied;
// - nothing comes back before reload_layer (step 1: only layer 3 is asked
//   for; backward_begin brings back just what it needs, no prefetch);
// - backward reads every layer's bytes back exactly;
// - misuse returns its code and changes nothing.
// Prints "manual ok=1"; exit 1 at the first failed check.
#define PROG "manual"
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "plus_one.h"

#define LAYERS 6
#define NAMED  4 // layers 0 .. NAMED-1 are offloaded
#define BYTES  (2u << 20)
#define N      (BYTES / sizeof(float))

static float *act[LAYERS];
static float *host;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, PROG ": line %d: %s: ", __LINE__, #cond);                              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static aoshim_stats_t ao(void)
{
    aoshim_stats_t s = {.size = sizeof s};
    CHECK(aoshim_get_stats(&s));
    return s;
}

static uint64_t copies(void)
{
    sim_stats_t s;
    CHECK(simrtGetStats(&s));
    return s.copies;
}

static void launch(const float *in, float *out)
{
    unsigned n = N;
    void *args[] = {&in, &out, &n};
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, 0));
}

static void forward_layer(int l)
{
    CHECK(aoshim_layer_begin(l));
    CHECK(cudaMallocAsync((void **)&act[l], BYTES, 0));
    if (l == 0) {
        for (size_t i = 0; i < N; i++)
            host[i] = 1.0f;
        CHECK(cudaMemcpyAsync(act[0], host, BYTES, cudaMemcpyHostToDevice, 0));
    } else {
        launch(act[l - 1], act[l]);
    }
    CHECK(aoshim_layer_end(l));
}

// Layer l's backward, after its backward_begin: read its output back, check
// every byte, free it.
static void backward_layer(int l)
{
    CHECK(cudaMemcpyAsync(host, act[l], BYTES, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
    for (size_t i = 0; i < N; i++)
        EXPECT(host[i] == (float)(l + 1), "layer %d element %zu: %g", l, i, (double)host[i]);
    CHECK(cudaFreeAsync(act[l], 0));
    CHECK(aoshim_backward_end(l));
}

static void backward(void)
{
    for (int l = LAYERS - 1; l >= 0; l--) {
        CHECK(aoshim_backward_begin(l));
        backward_layer(l);
    }
}

// Step 1: each named layer asked for right after its layer_end, as
// TransformerEngine's manual example does; only layer 3 reloaded by hand.
static void step1(void)
{
    uint64_t before = copies();
    forward_layer(0);
    uint64_t c0 = copies(); // the program's own upload of layer 0's input
    CHECK(aoshim_offload_layer(0));
    EXPECT(copies() == c0, "offload_layer(0) copied before layer 1 read layer 0");
    for (int l = 1; l < LAYERS; l++) {
        uint64_t c = copies();
        forward_layer(l);
        // layer_end(l) is layer l-1's release point: its copy goes now.
        if (l - 1 < NAMED)
            EXPECT(copies() > c, "layer %d not copied at its release point", l - 1);
        else
            EXPECT(copies() == c, "layer %d was never named but copied", l - 1);
        if (l < NAMED) {
            c = copies();
            CHECK(aoshim_offload_layer(l));
            EXPECT(copies() == c, "offload_layer(%d) copied at once", l);
        }
    }
    (void)before;
    for (int l = 0; l < NAMED; l++)
        CHECK(aoshim_release_layer(l));
    aoshim_stats_t s = ao();
    EXPECT(s.offloaded_bytes == (uint64_t)NAMED * BYTES, "offloaded %llu after the releases",
           (unsigned long long)s.offloaded_bytes);
    EXPECT(s.reloaded_bytes == 0, "reloaded %llu before any reload_layer",
           (unsigned long long)s.reloaded_bytes);
    CHECK(aoshim_reload_layer(3));
    EXPECT(ao().reloaded_bytes == BYTES, "reload_layer(3) did not reload layer 3 alone");
    // backward_begin(5), (4): resident; (3): layer 2 is needed and brought
    // back (late); layer 1 is not, and stays in host memory.
    for (int l = LAYERS - 1; l >= 3; l--) {
        CHECK(aoshim_backward_begin(l));
        uint64_t want = (l == 3 ? 2ull : 1ull) * BYTES;
        EXPECT(ao().reloaded_bytes == want, "after backward_begin(%d): reloaded %llu, want %llu", l,
               (unsigned long long)ao().reloaded_bytes, (unsigned long long)want);
        backward_layer(l);
    }
    for (int l = 2; l >= 0; l--) {
        CHECK(aoshim_backward_begin(l));
        backward_layer(l);
    }
    EXPECT(ao().reloaded_bytes == (uint64_t)NAMED * BYTES, "reloaded %llu in step 1",
           (unsigned long long)ao().reloaded_bytes);
    CHECK(aoshim_step_end());
}

// Step 2: layers named late (after their release point: copied at once),
// released, and every reload asked for before the backward.
static void step2(void)
{
    aoshim_stats_t s0 = ao();
    for (int l = 0; l < LAYERS; l++)
        forward_layer(l);
    EXPECT(ao().offloaded_bytes == s0.offloaded_bytes, "offloaded before any offload_layer");
    for (int l = 0; l < NAMED; l++) {
        uint64_t c = copies();
        CHECK(aoshim_offload_layer(l));
        EXPECT(copies() > c, "offload_layer(%d) past its release point did not copy", l);
        CHECK(aoshim_release_layer(l));
        EXPECT(ao().offloaded_bytes == s0.offloaded_bytes + (uint64_t)(l + 1) * BYTES,
               "release_layer(%d) returned before the layer was offloaded", l);
    }
    for (int l = NAMED - 1; l >= 0; l--)
        CHECK(aoshim_reload_layer(l));
    EXPECT(ao().reloaded_bytes == s0.reloaded_bytes + (uint64_t)NAMED * BYTES,
           "the reloads were not all issued");
    uint64_t late = ao().late_reloads;
    backward();
    EXPECT(ao().reloaded_bytes == s0.reloaded_bytes + (uint64_t)NAMED * BYTES,
           "backward reloaded again");
    EXPECT(ao().late_reloads == late, "late reloads in a fully commanded step");
    CHECK(aoshim_step_end());
}

// Misuse: each returns its code and changes nothing.
static void misuse(void)
{
    uint64_t offloaded = ao().offloaded_bytes;
    EXPECT(aoshim_set_schedule(7) == AOSHIM_EINVAL, "set_schedule(7)");
    EXPECT(aoshim_offload_layer(-1) == AOSHIM_EINVAL, "offload_layer(-1)");
    EXPECT(aoshim_reload_layer(0) == AOSHIM_ESTATE, "reload_layer of a layer that did not run");
    forward_layer(0);
    CHECK(aoshim_layer_begin(1));
    EXPECT(aoshim_set_schedule(AOSHIM_SCHEDULE_AUTO) == AOSHIM_ESTATE, "set_schedule in a layer");
    EXPECT(aoshim_offload_layer(1) == AOSHIM_ESTATE, "offload_layer of the open layer");
    CHECK(aoshim_layer_end(1));
    EXPECT(aoshim_release_layer(0) == AOSHIM_ESTATE, "release_layer before offload_layer");
    CHECK(aoshim_set_schedule(AOSHIM_SCHEDULE_AUTO));
    EXPECT(aoshim_offload_layer(0) == AOSHIM_ESTATE, "offload_layer in the automatic schedule");
    CHECK(aoshim_set_schedule(AOSHIM_SCHEDULE_MANUAL));
    EXPECT(ao().offloaded_bytes == offloaded, "misuse moved memory");
    CHECK(aoshim_step_end());
    CHECK(cudaFree(act[0]));
}

int main(void)
{
    if (!aoshim_loaded()) {
        fprintf(stderr, PROG ": run under LD_PRELOAD=libaoshim.so\n");
        return 2;
    }
    plus_one_register(20000);
    CHECK(cudaMallocHost((void **)&host, BYTES));
    CHECK(aoshim_set_schedule(AOSHIM_SCHEDULE_MANUAL));
    step1();
    step2();
    misuse();
    printf("manual ok=1\n");
    return 0;
}
